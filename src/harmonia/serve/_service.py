"""The server's state: engine, encoding, config, store, admission; requests made ready."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from harmonia import (
    Conversation,
    EngineError,
    HarmonyEncoding,
    HarmonyEncodingName,
    HarmonyError,
    Message,
    RenderConversationConfig,
    Role,
    load_harmony_encoding,
)

from .._names import BROWSER, PYTHON
from .._runtime import TIMEOUTS
from ..engines import Constraint, Engine, EngineRefusedError, SamplingParams, ScriptedEngine
from ..openai_compat import ChatCompletionStream, ResponseStream
from ._admission import Admission
from ._agent_driver import Prepared, Turn, TurnRequest, turn_constraint
from ._compact import Sealer
from ._config import ServerConfig
from ._errors import APIError, from_exception
from ._metrics import Metrics
from ._store import ResponseStore, check_tenancy, open_store

if TYPE_CHECKING:
    from ._asgi import Disconnect, SSEResponse
    from ._tool_loop import ToolLoop

log = logging.getLogger("harmonia.serve")


class Service:
    """What every route needs: engine, encoding, config, store, admission, metrics."""

    def __init__(
        self, engine: Engine, config: ServerConfig, store: ResponseStore | None = None
    ) -> None:
        self.engine = engine
        self.config = config
        self.store = (
            store if store is not None else open_store(config.store, config.memory_store_size)
        )
        if self.store is not None:
            check_tenancy(self.store)
        self.admission = Admission(config.concurrency, config.queue_size, config.retry_after_s)
        #: Signs compaction items (``HARMONIA_COMPACTION_KEY``, else a key of this process).
        self.sealer = Sealer.from_env()
        self.metrics = Metrics()
        self.encoding: HarmonyEncoding | None = None
        self.ready = False
        #: Whether start-up failed (``/health`` then says why, for good).
        self.failed = False
        #: Called once when start-up fails (``harmonia serve`` exits 1).
        self.on_start_failure: Callable[[], None] | None = None
        #: Called once when start-up succeeded, just before ``/health`` turns green.
        self.on_ready: Callable[[], None] | None = None
        self.not_ready_reason = "starting: loading the vocabulary"
        #: Turns holding an admission slot (the shutdown ends those still running).
        self.turns: set[Turn] = set()
        #: SSE answers still being written (the shutdown waits for them).
        self.open_streams = 0
        #: Set once a shutdown began: why ``/health`` is 503 (liveness stays 200).
        self.draining: str | None = None
        #: Why the engine looks down (a failed request or health probe); ``None``: up.
        self.engine_down: str | None = None
        self._probe: asyncio.Future[None] | None = None
        self._probed_at = -1e9

    # -- start-up ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Vocabulary, then a one-token warm-up; ``/health`` is green only after both."""
        try:
            encoding: HarmonyEncoding = await asyncio.to_thread(
                load_harmony_encoding,
                HarmonyEncodingName.HARMONY_GPT_OSS,
                engine=self.config.bpe_engine,  # type: ignore[arg-type]
            )
            self.encoding = encoding
            # A scripted engine has nothing to warm, and a warm-up generation would use
            # up its first script: the first real request gets it.
            if self.config.warmup and not isinstance(self.engine, ScriptedEngine):
                self.not_ready_reason = "starting: warming up the engine"
                conversation = Conversation.from_messages(
                    [Message.from_role_and_content(Role.USER, "Hi")]
                )
                prompt = encoding.render_conversation_for_completion(conversation, Role.ASSISTANT)
                generation = self.engine.generate(prompt, SamplingParams(max_tokens=1))
                await generation.result()
                # llguidance builds its tokenizer tables on first use (about a second):
                # here, off the loop, rather than inside the first strict request.
                await asyncio.to_thread(_warm_constraints, conversation)
            await self._fit_admission()
            if self.on_ready is not None:
                self.on_ready()
            self.ready = True
            log.info("ready: engine %s, model %s", self.engine.name, self.config.model)
        except Exception as exc:
            self.not_ready_reason = f"start-up failed: {type(exc).__name__}: {exc}"
            self.failed = True
            if isinstance(exc, HarmonyError):  # an engine that cannot start: no trace needed
                log.error("%s", self.not_ready_reason)
            else:
                log.exception("start-up failed")
            if self.on_start_failure is not None:
                self.on_start_failure()

    async def _fit_admission(self) -> None:
        """Without ``max_concurrent``, admit as many generations as the engine runs at once
        when it can say (``engine.max_sequences()``; llama-server: its slots)."""
        ask = getattr(self.engine, "max_sequences", None)
        if self.config.max_concurrent is not None or not callable(ask):
            return
        try:
            sequences = await ask()
        except EngineError as exc:  # the default stands; the warm-up already reached it
            log.warning("the engine did not say how many sequences it runs: %s", exc)
            return
        if isinstance(sequences, int) and sequences >= 1:
            self.admission.resize(sequences)
            log.info("admitting %d generations at once (the engine runs as many)", sequences)

    @property
    def enc(self) -> HarmonyEncoding:
        if self.encoding is None or not self.ready:
            raise APIError(
                503,
                f"the server is not ready yet ({self.not_ready_reason})",
                code="not_ready",
                headers={"Retry-After": "1"},
            )
        return self.encoding

    # -- request helpers ---------------------------------------------------------------------

    def check_model(self, model: str) -> None:
        if model not in self.config.model_names:
            raise APIError(
                404,
                f"the model {model!r} does not exist on this server; it serves "
                + ", ".join(repr(name) for name in self.config.model_names),
                param="model",
                code="model_not_found",
            )

    def sampling(
        self,
        max_tokens: int | None,
        temperature: float | None,
        top_p: float | None,
        seed: int | None = None,
    ) -> SamplingParams:
        cap = self.config.output_cap
        if max_tokens is not None and max_tokens > cap:
            raise APIError(
                400,
                f"max tokens {max_tokens} is more than this server allows ({cap}"
                + (", the model's context)" if cap == self.config.context_tokens else ")"),
                code="invalid_value",
            )
        given: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
        }
        return SamplingParams(**{key: value for key, value in given.items() if value is not None})

    def render(self, conversation: Conversation) -> list[int]:
        """The prompt for the assistant's next turn, under the configured CoT policy."""
        config = RenderConversationConfig(cot_policy=self.config.cot_policy)  # type: ignore[arg-type]
        return self.enc.render_conversation_for_completion(conversation, Role.ASSISTANT, config)

    def prepare(
        self,
        conversation: Conversation,
        tool_choice: str | None,
        strict: bool,
        prompt: list[int] | None = None,
    ) -> Prepared:
        """Render ``conversation`` (unless ``prompt`` is given), check its size, build the
        constraint. Run it in a worker thread."""
        if prompt is None:
            prompt = self.render(conversation)
        limit = min(self.config.max_input_tokens, self.config.context_tokens - 1)
        if len(prompt) > limit:
            raise APIError(
                400,
                f"the prompt is {len(prompt)} tokens, more than this server's limit of "
                f"{limit}; shorten the input",
                code="context_length_exceeded",
            )
        constraint = None
        if strict or tool_choice not in (None, "auto", "none"):
            constraint = turn_constraint(conversation, tool_choice or "auto")
        return Prepared(conversation, prompt, constraint, strict, tool_choice)

    # -- the loop ------------------------------------------------------------------------------

    async def admit(
        self,
        prepared: Prepared,
        params: SamplingParams,
        stream: ResponseStream | ChatCompletionStream,
        tool_loop: ToolLoop | None = None,
    ) -> Turn:
        """Wait for a slot (429 when the queue is full); the turn that holds it.

        Without a tool loop the engine starts now, so that an engine refusing
        the request is the caller's status, not a broken stream; a tool loop
        starts its turn itself.
        """
        request = TurnRequest(
            self.engine,
            self.enc,
            prepared,
            params,
            stream,
            context_tokens=self.config.context_tokens,
            cot_policy=self.config.cot_policy,
            metrics=self.metrics,
            runner=None if tool_loop is None else tool_loop.run,
            on_engine_failure=self.note_engine_failure,
            on_engine_success=self.note_engine_success,
            on_close=self._turn_closed,
        )
        turn = Turn(request)
        await self.admission.acquire()
        self.turns.add(turn)
        try:
            if tool_loop is None:
                turn.start()
        except BaseException:
            await turn.close()
            raise
        return turn

    def _turn_closed(self, turn: Turn) -> None:
        self.turns.discard(turn)
        self.admission.release()

    def sse(
        self,
        frames: AsyncIterator[bytes],
        disconnect: Disconnect,
        turn: Turn | None = None,
        encode: Callable[[list[dict[str, Any]]], bytes] | None = None,
    ) -> SSEResponse:
        """A streamed answer; ``turn``'s slot is given back when the stream ends.

        With ``encode`` (how ``frames`` encodes a batch of ``turn``'s events), the
        turn pushes its events through the answer as the engine makes them.
        """
        from ._asgi import SSEResponse  # the web framework: only once a request is answered

        answer = SSEResponse(
            frames,
            disconnect,
            send_timeout_s=self.config.send_timeout_s,
            ping_interval_s=self.config.ping_interval_s,
            on_close=None if turn is None else turn.close,
            on_disconnect=self.note_disconnect,
            on_stalled=self.note_stalled_client,
            on_open=self._stream_opened,
        )
        if turn is not None and encode is not None:
            push = answer.pusher(encode)
            answer.on_streaming = lambda streaming: turn.push_to(push if streaming else None)
        return answer

    def _stream_opened(self, change: int) -> None:
        self.open_streams += change

    async def run_to_end(
        self, events: AsyncIterator[object], disconnect: Disconnect, turn: Turn, request_id: str
    ) -> None:
        """Drain an answer that is not streamed; an engine failure is its 4xx/502, not a 500."""

        async def drain() -> None:
            async for _ in events:
                pass

        try:
            await disconnect.race(drain())
        except EngineError as exc:
            log.error("[%s] engine failed: %s", request_id, exc)
            self.note_engine_failure(exc)
            raise from_exception(exc) from None
        finally:
            disconnect.close()
            await turn.close()

    def note_disconnect(self) -> None:
        self.metrics.disconnects += 1

    def note_stalled_client(self) -> None:
        # Counted as an error kind: the server ended the stream, not the client.
        self.metrics.errors["client_stalled"] += 1

    # -- health --------------------------------------------------------------------------

    def note_engine_failure(self, exc: EngineError) -> None:
        """An engine that can be probed counts as down until a probe (``/health``) or a
        generation says it is back; a refusal says nothing of its health."""
        if _probe_of(self.engine) is not None and not isinstance(exc, EngineRefusedError):
            self.engine_down = str(exc)

    def note_engine_success(self) -> None:
        self.engine_down = None

    @property
    def serving(self) -> bool:
        """Whether new requests can be served now (``harmonia_ready``): started, not
        shutting down, and the engine not known to be down."""
        return self.ready and self.draining is None and self.engine_down is None

    async def readiness(self) -> str | None:
        """``None`` when ready to serve; else why not (``/health`` answers 503 with it).

        An engine with a ``health()`` probe (the HTTP engines: its server's own
        ``/health``) is asked, at most once per :data:`HEALTH_PROBE_S`.
        """
        if not self.ready:
            return self.not_ready_reason
        if self.draining is not None:
            return self.draining
        probe = _probe_of(self.engine)
        if probe is not None:
            loop = asyncio.get_running_loop()
            if self._probe is None and loop.time() - self._probed_at >= HEALTH_PROBE_S:
                self._probed_at = loop.time()
                self._probe = asyncio.ensure_future(probe())
            if self._probe is not None:
                probing = self._probe
                try:
                    await asyncio.shield(probing)
                    self.engine_down = None
                except Exception as exc:  # EngineError; anything else says as much
                    self.engine_down = str(exc)
                finally:
                    if self._probe is probing:
                        self._probe = None
        if self.engine_down is not None:
            return f"the engine is down: {self.engine_down}"
        return None

    async def aclose(self) -> None:
        if self.store is not None:
            await self.store.aclose()


#: Seconds between two health probes of the engine's server (``/health`` calls share one).
HEALTH_PROBE_S = TIMEOUTS.engine_health_probe


def _probe_of(engine: Engine) -> Callable[[], Awaitable[None]] | None:
    """The engine's ``health()`` probe (raises ``EngineError`` when its server is down), if any."""
    probe = getattr(engine, "health", None)
    return probe if callable(probe) else None


def _warm_constraints(conversation: Conversation) -> None:
    try:
        Constraint.from_conversation(conversation).new_matcher()
    except Exception as exc:  # constrained decoding is optional (harmonia[constrained])
        log.info("strict output will not be available in process: %s", exc)


def logged_error(exc: Exception, request_id: str) -> APIError:
    """The answer for ``exc``, logged: with its trace when it is a bug (a 500 that no
    harmonia error explains)."""
    error = from_exception(exc)
    if error.status >= 500 and not isinstance(exc, APIError | HarmonyError):
        log.exception("[%s] %s", request_id, error.message)
    else:
        log.info("[%s] %d %s", request_id, error.status, error.message)
    return error


def log_diagnostics(stream: ResponseStream | ChatCompletionStream, request_id: str) -> None:
    """Model-output repairs go to the log, never to a 500."""
    for diagnostic in stream.diagnostics:
        log.warning("[%s] model output repaired: %s", request_id, diagnostic)


def builtin_recipient(kind: object) -> str | None:
    """The harmony tool a built-in Responses tool type runs as (``web_search``,
    ``web_search_preview`` and their dated variants: the browser, whose turn begins
    with ``browser.search``; ``code_interpreter``: ``python``), else ``None``."""
    if isinstance(kind, str) and kind.startswith("web_search"):
        return f"{BROWSER}.search"
    if kind == "code_interpreter":
        return PYTHON
    return None


def tool_choice_option(choice: object) -> str | None:
    """A request's ``tool_choice`` as ``GrammarOptions.tool_choice`` (``None``: not given).

    A built-in tool's type (``{"type": "web_search"}``) forces a call to its harmony
    tool on the first step, as a named function does.
    """
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        recipient = builtin_recipient(kind)
        if recipient is not None:
            return recipient
        if kind == "function":
            function = choice.get("function")
            name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
            if isinstance(name, str):
                return name
        if kind == "allowed_tools":
            mode = choice.get("mode")
            return mode if isinstance(mode, str) else None
    raise APIError(
        400,
        "tool_choice must be 'auto', 'none', 'required', name a function, or be a "
        "built-in tool's type (web_search, code_interpreter)",
        param="tool_choice",
        code="invalid_value",
    )
