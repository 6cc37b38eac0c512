"""``/v1/responses``: create (streaming, background), retrieve, delete, cancel, input items.

A response's whole input (earlier turns expanded) and its prompt and
completion tokens are stored together, so ``previous_response_id`` continues
from exactly what the model saw. Built-in tools (``web_search*``,
``code_interpreter``) need a tool-running loop, plugged in as a
:class:`ToolLoop`; those the server cannot run are left out of the prompt
(and named in the ``x-harmonia-omitted-tools`` header).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from harmonia import EngineError
from harmonia._runtime import TIMEOUTS

from ..engines import SamplingParams
from ..openai_compat import ResponseStream, ending_events
from ..openai_compat._responses_output import response_with_every_key
from ._agent_driver import Prepared, Turn
from ._asgi import Disconnect, json_response, stream_failed
from ._background import (
    DONE_FRAME,
    BackgroundRun,
    CancelWatch,
    LeaseKeeper,
    cancel_elsewhere,
    frame,
    replica_name,
    settle_orphan,
)
from ._compact import compaction, summarising_request
from ._errors import APIError, ServerShuttingDown
from ._request import ResponsesBody, read_json, responses_logprobs, validate
from ._responses_input import RUNNING, expand_context, get_record, prepare_responses
from ._service import Service, builtin_recipient, log, log_diagnostics
from ._store import StoredResponse, StoreUnavailableError
from ._tool_loop import ToolLoop

JsonDict = dict[str, Any]

#: The response header naming the built-in tools a request declared that were left out.
OMITTED_TOOLS_HEADER = "x-harmonia-omitted-tools"


@dataclass
class Plan:
    """A create request made ready to run (:meth:`Responses.plan`)."""

    body: ResponsesBody
    #: Whether the finished response goes to the store.
    store: bool
    stream: ResponseStream
    #: ``response.created`` and ``response.in_progress``.
    opening: list[JsonDict]
    #: Every input item the model sees (earlier turns expanded).
    context: list[JsonDict]
    prepared: Prepared
    params: SamplingParams
    tenant: str
    tool_loop: ToolLoop | None

    @property
    def snapshot(self) -> JsonDict:
        """The response as ``response.created`` announced it."""
        response: JsonDict = self.opening[0]["response"]
        return response

    @property
    def id(self) -> str:
        return str(self.snapshot["id"])

    def record(self, response: JsonDict, completion: Sequence[int] = ()) -> StoredResponse:
        """The store's record of ``response`` (with the ids sampled for it)."""
        prompt = tuple(self.prepared.prompt)
        return StoredResponse(
            self.id, response, self.context, prompt, tuple(completion), self.tenant
        )

    def admit(self, service: Service) -> Coroutine[Any, Any, Turn]:
        """Wait for a generation slot (429 when the queue is full); the turn holding it."""
        return service.admit(self.prepared, self.params, self.stream, self.tool_loop)


class Responses:
    """The Responses routes over one :class:`Service`."""

    def __init__(self, service: Service, tool_loop: ToolLoop | None = None) -> None:
        self.service = service
        self.tool_loop = tool_loop
        self.background: dict[str, BackgroundRun] = {}
        config, store = service.config, service.store
        self._watch: CancelWatch | None = None
        self._leases: LeaseKeeper | None = None
        if store is not None:
            self._watch = CancelWatch(store, self.background, config.cancel_poll_s)
            owner, lease_s = replica_name(config.worker_index), config.background_lease_s
            self._leases = LeaseKeeper(store, self.background, owner, lease_s, self._now)

    def _now(self) -> float:
        """Seconds since the epoch, on the config's clock (the one tests inject)."""
        return self.service.config.clock().timestamp()

    # -- POST /v1/responses ----------------------------------------------------------------

    async def create(self, request: Request, request_id: str) -> Response:
        omitted: list[str] = []
        response = await self._create(request, request_id, omitted)
        if omitted:
            response.headers[OMITTED_TOOLS_HEADER] = ", ".join(omitted)
        return response

    def _runnable(self, tool_type: str) -> str | None:
        """``None`` when this server can run the built-in ``tool_type``, else why not."""
        if self.tool_loop is None:
            return "no tool-running loop (--browser / --python)"
        check = getattr(self.tool_loop, "check", None)
        if callable(check):
            try:
                check([tool_type])
            except APIError as exc:
                return exc.message
        return None

    def _omit_builtins(
        self, data: JsonDict, body: ResponsesBody, omitted: list[str], request_id: str
    ) -> tuple[JsonDict, ResponsesBody]:
        """Leave out of the prompt the built-in tools this server cannot run.

        The model is not told of them, so it cannot call them; the request is
        answered (Codex declares ``web_search`` by default), and the
        ``x-harmonia-omitted-tools`` header and the log say what was left out.
        """
        kept: list[Any] = []
        for tool in body.tools or ():
            kind = tool.get("type")
            why = None if builtin_recipient(kind) is None else self._runnable(str(kind))
            if why is None:
                kept.append(tool)
            else:
                omitted.append(str(kind))
                log.info("[%s] built-in tool %s left out of the prompt: %s", request_id, kind, why)
        if not omitted:
            return data, body
        data = {**data, "tools": kept}
        return data, body.model_copy(update={"tools": kept})

    async def plan(
        self,
        data: JsonDict,
        tenant: str,
        request_id: str,
        omitted: list[str],
        local: Mapping[str, StoredResponse] | None = None,
    ) -> Plan:
        """A create request (``data``, ``tenant``'s) checked and made ready to run: every
        transport's one path (HTTP and WebSocket). ``local``: responses a WebSocket
        connection keeps for ``previous_response_id`` (found there before the store)."""
        service = self.service
        body: ResponsesBody = validate(ResponsesBody, data)
        service.check_model(body.model)
        top_logprobs = responses_logprobs(service.engine, body)
        enc = service.enc
        data, body = self._omit_builtins(data, body, omitted, request_id)
        _check_builtin_choice(body, omitted)
        builtin = any(builtin_recipient(t.get("type")) is not None for t in body.tools or ())
        store = body.store is not False and service.store is not None
        if body.background and not store:
            raise APIError(
                400,
                "background responses must be stored: send store=true (and run the server "
                "with a store)",
                param="background",
                code="invalid_value",
            )
        params = service.sampling(body.max_output_tokens, body.temperature, body.top_p)
        params = replace(params, top_logprobs=top_logprobs)
        context, previous = await expand_context(
            service, body, data, tenant, local, settle=self._settled
        )
        render = {k: v for k, v in data.items() if k != "previous_response_id"}
        render["input"] = context
        prepared = await asyncio.to_thread(
            prepare_responses, service, render, body, previous, tenant
        )
        echo = dict(data)
        echo["store"] = store
        stream = ResponseStream(
            enc,
            model=body.model,
            request=echo,
            prompt_tokens=len(prepared.prompt),
            # A loop that runs browser/python calls shows them as the SDK's built-in items.
            builtin_calls="native" if builtin else "function_call",
            logprobs=top_logprobs is not None,
        )
        tool_loop = self.tool_loop if builtin else None
        return Plan(
            body, store, stream, stream.start(), context, prepared, params, tenant, tool_loop
        )

    async def compact(self, request: Request, request_id: str) -> Response:
        """``POST /v1/responses/compact``: the spec's ``response.compaction`` object (the
        model summarises the conversation in a turn of its own; see ``_compact``)."""
        service = self.service
        data = await read_json(request, service.config.max_body_bytes)
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise APIError(
                400,
                "model is required: the model that writes the summary",
                param="model",
                code="missing_required_parameter",
            )
        tenant = tenant_of(request)
        # Every input item, earlier turns expanded: what the summary stands for.
        keep: JsonDict = {
            k: data[k] for k in ("model", "input", "previous_response_id") if k in data
        }
        body: ResponsesBody = validate(ResponsesBody, keep)
        service.check_model(body.model)
        items, _ = await expand_context(service, body, keep, tenant)
        plan = await self.plan(summarising_request(model, items), tenant, request_id, [])
        disconnect = Disconnect(request.receive)
        job = await disconnect.race_or_close(plan.admit(service))
        await service.run_to_end(self.events(plan, job, request_id), disconnect, job, request_id)
        return json_response(compaction(service.sealer, plan.stream.response, items, tenant, model))

    async def _create(self, request: Request, request_id: str, omitted: list[str]) -> Response:
        service = self.service
        data = await read_json(request, service.config.max_body_bytes)
        plan = await self.plan(data, tenant_of(request), request_id, omitted)
        if plan.body.background:
            service.admission.check()
            queued = {**plan.snapshot, "status": "queued"}
            assert service.store is not None and self._leases is not None
            # The lease first: a replica that dies between the two leaves a lease that runs
            # out, never a running record without one.
            await self._leases.renew([plan.id])
            await service.store.put(plan.record(queued))
            run = BackgroundRun()
            run.publish(plan.opening)
            self.background[plan.id] = run
            run.task = asyncio.ensure_future(self._background(run, plan, request_id))
            assert self._watch is not None
            self._watch.wake()
            self._leases.wake()
            if plan.body.stream:
                return service.sse(run.follow(-1), Disconnect(request.receive))
            return json_response(queued)

        disconnect = Disconnect(request.receive)
        job = await disconnect.race_or_close(plan.admit(service))
        events = self.events(plan, job, request_id)
        if plan.body.stream:
            encode = _Encoder()
            frames = self._frames(events, encode, plan.snapshot, request_id)
            return service.sse(frames, disconnect, job, encode)
        await service.run_to_end(events, disconnect, job, request_id)
        return json_response(plan.stream.response)

    async def events(self, plan: Plan, job: Turn, request_id: str) -> AsyncIterator[list[JsonDict]]:
        """The response's events in batches, from ``response.created`` to its end; the
        finished response is stored (when it is to be) before its last batch goes out."""
        yield plan.opening
        async for batch in job.events():
            if stream_finished(batch) and plan.store:
                assert self.service.store is not None
                await self.service.store.put(plan.record(plan.stream.response, job.tokens))
            yield batch
        log_diagnostics(plan.stream, request_id)

    async def _frames(
        self,
        events: AsyncIterator[list[JsonDict]],
        encode: _Encoder,
        snapshot: JsonDict,
        request_id: str,
    ) -> AsyncIterator[bytes]:
        try:
            async for batch in events:
                yield encode(batch)
        except (EngineError, ServerShuttingDown, StoreUnavailableError) as exc:
            if isinstance(exc, StoreUnavailableError):
                self.service.metrics.errors["store_unavailable"] += 1
            status, failure = failed_stream(exc, snapshot, encode.last, request_id)
            stream_failed(status)
            yield b"".join(frame(event) for event in failure)
        yield DONE_FRAME

    async def _background(self, run: BackgroundRun, plan: Plan, request_id: str) -> None:
        service, stream, record = self.service, plan.stream, plan.record
        assert service.store is not None
        snapshot = run.events[0]["response"]
        last = run.events[-1]["sequence_number"]
        job: Turn | None = None
        try:
            job = await plan.admit(service)
            try:
                await service.store.put(record({**snapshot, "status": "in_progress"}))
            except StoreUnavailableError as exc:  # it runs all the same; its end is kept
                log.warning("[%s] background response: %s", request_id, exc)
                service.metrics.errors["store_unavailable"] += 1
            async for batch in job.events():
                if stream_finished(batch):
                    await self._keep(record(stream.response, job.tokens), request_id)
                last = batch[-1]["sequence_number"] if batch else last
                run.publish(batch)
            log_diagnostics(stream, request_id)
        except asyncio.CancelledError:
            if job is not None:  # the engine stops before the store says it has
                await job.close()
            await self._keep(record({**snapshot, "status": "cancelled"}), request_id)
        except Exception as exc:
            cause, message = "the engine failed", "internal server error"
            if isinstance(exc, ServerShuttingDown):
                log.warning("[%s] background response: %s", request_id, exc.message)
                cause, message = SHUTDOWN_CAUSE, exc.message
            elif isinstance(exc, EngineError):
                log.error("[%s] engine failed in background: %s", request_id, exc)
                message = str(exc)
            else:
                log.exception("[%s] background response failed", request_id)
            service.metrics.errors["background_failed"] += 1
            failure = _failure(snapshot, last, message, cause=cause)
            await self._keep(record(failure[0]["response"]), request_id)
            run.publish(failure)
        finally:
            if job is not None:
                await job.close()
            run.end()
            self.background.pop(snapshot["id"], None)

    async def _keep(self, record: StoredResponse, request_id: str) -> None:
        """Store a background run's last record, however long the store is down: until
        it is, polls answer 503 and then find it, never a response left running.

        Only cancelling the run again (a shutdown's last resort) gives up; its
        lease, no longer renewed, then has the record reported failed.
        """
        assert self.service.store is not None
        failing = False
        while True:
            try:
                await self.service.store.put(record)
                if failing:
                    log.info("[%s] background response stored after all", request_id)
                return
            except StoreUnavailableError as exc:
                if not failing:
                    log.warning(
                        "[%s] background response (its record is kept to retry): %s",
                        request_id,
                        exc,
                    )
                    self.service.metrics.errors["store_unavailable"] += 1
                failing = True
            await asyncio.sleep(TIMEOUTS.store_retry)

    async def _record(self, response_id: str, tenant: str) -> StoredResponse:
        """``tenant``'s stored response, a running one whose replica is gone settled
        as ``failed`` (see :func:`settle_orphan`)."""
        return await self._settled(await get_record(self.service, response_id, tenant))

    async def _settled(self, record: StoredResponse) -> StoredResponse:
        if record.id in self.background:  # ours: alive, whatever the clock says
            return record
        assert self.service.store is not None
        settled = await settle_orphan(self.service.store, record, self._now())
        if settled is not record:
            self.service.metrics.errors["background_orphaned"] += 1
        return settled

    # -- GET / DELETE / cancel / input_items ---------------------------------------------------

    async def retrieve(self, request: Request, response_id: str) -> Response:
        record = await self._record(response_id, tenant_of(request))
        if request.query_params.get("stream") in ("true", "1"):
            run = self.background.get(response_id)
            if run is None:
                raise APIError(
                    400,
                    f"response {response_id!r} is not a background response running on this "
                    "server; only those can be streamed again",
                    param="stream",
                    code="invalid_value",
                )
            after = request.query_params.get("starting_after", "-1")
            if not after.lstrip("-").isdigit():
                raise APIError(400, "starting_after must be an integer", param="starting_after")
            return self.service.sse(run.follow(int(after)), Disconnect(request.receive))
        return json_response(response_with_every_key(record.response))

    async def delete(self, request: Request, response_id: str) -> Response:
        record = await self._record(response_id, tenant_of(request))
        # A running response is cancelled first, and its cancelled record written,
        # so that the run does not write the record back after the delete.
        try:
            await self._stop(record)
        except APIError as exc:
            if exc.code != "cancel_not_confirmed":
                raise
            # Its replica is gone (or too slow to answer): delete it anyway, or it never goes.
            log.warning("deleting %s, which its replica did not confirm cancelled", response_id)
        assert self.service.store is not None
        await self.service.store.delete(response_id, record.tenant)
        return json_response({"id": response_id, "object": "response", "deleted": True})

    async def cancel(self, request: Request, response_id: str) -> Response:
        record = await self._record(response_id, tenant_of(request))
        if record.response.get("background") is not True:
            raise APIError(
                400,
                f"response {response_id!r} was not created with background=true; only "
                "background responses can be cancelled",
                code="invalid_value",
            )
        return json_response(response_with_every_key((await self._stop(record)).response))

    async def _stop(self, record: StoredResponse) -> StoredResponse:
        """Cancel ``record``'s run if it still runs, here or on another replica; its record."""
        run = self.background.get(record.id)
        if run is not None and run.cancel():
            assert run.task is not None
            await asyncio.wait((run.task,))
            return await get_record(self.service, record.id, record.tenant)
        if record.status in RUNNING:
            # Another replica runs it (or ran it and died): ask it through the store.
            config, store = self.service.config, self.service.store
            assert store is not None
            return await cancel_elsewhere(store, record, config.cancel_wait_s, config.cancel_poll_s)
        return record

    async def aclose(self) -> None:
        """Cancel the runs (each records ``cancelled``) and stop watching for cancels."""
        tasks = [run.task for run in self.background.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        # Let each cancelled run record its status before the store closes; a store that
        # is down gets a bound, then the runs are cancelled again (their leases run out).
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=TIMEOUTS.shutdown_close)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for watch in (self._watch, self._leases):
            if watch is not None:
                await watch.aclose()

    async def input_items(self, request: Request, response_id: str) -> Response:
        record = await get_record(self.service, response_id, tenant_of(request))
        query = request.query_params
        order = query.get("order", "desc")
        limit_text = query.get("limit", "20")
        if (
            order not in ("asc", "desc")
            or not limit_text.isdigit()
            or not 1 <= int(limit_text) <= 100
        ):
            raise APIError(
                400, "order must be asc or desc and limit between 1 and 100", code="invalid_value"
            )
        items = list(record.context if order == "asc" else reversed(record.context))
        after = query.get("after")
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise APIError(
                    404, f"no input item {after!r}", param="after", code="item_not_found"
                )
            items = items[ids.index(after) + 1 :]
        page = items[: int(limit_text)]
        return json_response(
            {
                "object": "list",
                "data": page,
                "first_id": page[0].get("id") if page else None,
                "last_id": page[-1].get("id") if page else None,
                "has_more": len(items) > len(page),
            }
        )


class _Encoder:
    """A batch of events as SSE frames, remembering the last sequence number sent (the
    turn pushes batches through it, :meth:`Responses._frames` yields the others)."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self, batch: list[JsonDict]) -> bytes:
        if batch:
            self.last = batch[-1]["sequence_number"]
        if len(batch) == 1:  # most batches: one streamed token's delta
            return frame(batch[0])
        return b"".join([frame(event) for event in batch])


def _check_builtin_choice(body: ResponsesBody, omitted: Sequence[str]) -> None:
    """A ``tool_choice`` naming a built-in tool needs that tool declared and runnable."""
    choice = body.tool_choice if isinstance(body.tool_choice, dict) else {}
    kind = choice.get("type")
    wanted = builtin_recipient(kind)
    if wanted is None or wanted in {builtin_recipient(t.get("type")) for t in body.tools or ()}:
        return
    why = (
        "this server cannot run it (see the x-harmonia-omitted-tools header)"
        if any(builtin_recipient(k) == wanted for k in omitted)
        else "the request's tools do not declare it"
    )
    raise APIError(
        400,
        f"tool_choice asks for the built-in tool {kind!r}, but {why}",
        param="tool_choice",
        code="invalid_value",
    )


def tenant_of(request: Request) -> str:
    """Whose the request's stored objects are (the server's guard set it: no default)."""
    return str(request.state.tenant)


def stream_finished(batch: Sequence[JsonDict]) -> bool:
    """Whether ``batch`` ends the response (its last event is the terminal one)."""
    return bool(batch) and batch[-1].get("type") in ("response.completed", "response.incomplete")


#: What a response ended by the shutdown timeout says failed.
SHUTDOWN_CAUSE = "the server shut down before the response finished"
#: What a streamed response whose record the store refused says failed.
STORE_CAUSE = "the response was generated but could not be stored"


def _failure(
    snapshot: JsonDict, last: int, message: str, *, cause: str = "the engine failed"
) -> list[JsonDict]:
    """``response.failed`` then ``error``, numbered after event ``last``."""
    return ending_events(snapshot, last, message=f"{cause}: {message}")


def failed_stream(
    exc: Exception, snapshot: JsonDict, last: int, request_id: str
) -> tuple[int, list[JsonDict]]:
    """The status and the ending events of a stream that ``exc`` (an engine failure, the
    shutdown timeout, a store that refused the finished response) ended; logged."""
    if isinstance(exc, ServerShuttingDown):
        log.warning("[%s] %s", request_id, exc.message)
        return exc.status, _failure(snapshot, last, exc.message, cause=SHUTDOWN_CAUSE)
    if isinstance(exc, StoreUnavailableError):  # the answer is whole, but cannot be kept
        log.error("[%s] %s", request_id, exc)
        return 503, _failure(snapshot, last, str(exc), cause=STORE_CAUSE)
    log.error("[%s] engine failed mid-stream: %s", request_id, exc)
    return 502, _failure(snapshot, last, str(exc))
