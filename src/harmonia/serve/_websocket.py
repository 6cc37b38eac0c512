"""WebSocket mode of ``/v1/responses`` (the transport Codex dials first).

One connection carries sequential requests. Each client text frame is a
Responses request body with ``"type": "response.create"`` (``generate: false``
makes the response without sampling: a prewarm whose id can be continued);
the server answers with exactly the events an SSE stream would carry, one
event per text frame. A request that fails before its response starts is an
in-band ``{"type": "error", "status": ..., "error": {...}}`` frame and the
connection stays open. Every request goes through the HTTP path's own
:meth:`~harmonia.serve._responses.Responses.plan` and
:meth:`~harmonia.serve._responses.Responses.events` (the same checks, tenancy,
admission, store and metrics); a client that closes the connection cancels the
generation. The connection keeps its last response, so a continuation works
even with ``store: false``; a failed continuation forgets it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocketDisconnect

from harmonia import EngineError

from ._asgi import ClientGone, Disconnect, dumps
from ._errors import APIError, ServerShuttingDown
from ._responses import Plan, Responses, failed_stream
from ._service import log, logged_error

if TYPE_CHECKING:
    from ._store import StoredResponse

JsonDict = dict[str, Any]
Message = MutableMapping[str, Any]

#: The metrics' route of a request made over the socket (the same as over HTTP).
ROUTE = "/v1/responses"
#: HTTP fields and the value a socket can honour (the spec says a client MUST NOT send
#: them; Codex sends ``stream: true``): these values are ignored, any other is a 400.
_HTTP_ONLY: dict[str, tuple[object, ...]] = {
    "stream": (None, True),
    "stream_options": (),  # any value: nothing to choose on a socket
    "background": (None, False),
}


class ResponsesSocket:
    """One accepted connection: reads ``response.create`` frames and answers each in turn."""

    def __init__(
        self,
        responses: Responses,
        tenant: str,
        request_id: str,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        self.responses = responses
        self.service = responses.service
        self.tenant = tenant
        self.request_id = request_id
        self._receive = receive
        self._send = send
        #: The connection's last response (``previous_response_id`` finds it here first).
        self.local: dict[str, StoredResponse] = {}
        self._count = 0
        #: Frames that came while a response streamed (answered after it, in order).
        self._backlog: list[Message] = []

    async def run(self) -> None:
        """Serve the connection until the client closes it."""
        while True:
            message = self._backlog.pop(0) if self._backlog else await self._receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive":
                continue
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            self._count += 1
            request_id = f"{self.request_id}.{self._count}"
            if not await self._one(text, request_id):
                return  # the client left mid-response

    async def _one(self, text: str, request_id: str) -> bool:
        """Answer one frame; ``False`` when the client left while it was answered."""
        status = 200
        try:
            data = self._request(text)
            generate = data.pop("generate", True)
            omitted: list[str] = []
            try:
                plan = await self.responses.plan(data, self.tenant, request_id, omitted, self.local)
            except Exception:
                if data.get("previous_response_id") is not None:
                    self.local.clear()  # a failed continuation: the cache is stale
                raise
            if generate is False:
                await self._prewarm(plan)
            else:
                return await self._generate(plan, request_id)
        except ClientGone:
            status = 499
            self.service.note_disconnect()
            log.info("[%s] client closed the socket; generation cancelled", request_id)
            return False
        except Exception as exc:
            error = logged_error(exc, request_id)
            status = error.status
            await self._send_json(error_frame(error))
        finally:
            self.service.metrics.request(ROUTE, status)
        return True

    def _request(self, text: str) -> JsonDict:
        if len(text.encode()) > self.service.config.max_body_bytes:
            raise APIError(
                413,
                "the request frame is larger than this server's limit of "
                f"{self.service.config.max_body_bytes} bytes",
                code="request_too_large",
            )
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise APIError(
                400, f"the frame is not valid JSON ({exc})", code="invalid_json"
            ) from None
        if not isinstance(data, dict) or data.get("type") != "response.create":
            raise APIError(
                400,
                'each frame must be a JSON object with "type": "response.create" and the '
                "fields of a Responses request",
                param="type",
                code="invalid_value",
            )
        del data["type"]
        for key, honoured in _HTTP_ONLY.items():
            value = data.pop(key, None)
            if honoured and value not in honoured:
                raise APIError(
                    400,
                    f"{key}={json.dumps(value)} cannot be honoured: a WebSocket response "
                    "always streams, in the foreground; leave it out",
                    param=key,
                    code="invalid_value",
                )
        generate = data.get("generate", True)
        if not isinstance(generate, bool):
            raise APIError(400, "generate must be true or false", param="generate")
        return data

    async def _prewarm(self, plan: Plan) -> None:
        """``generate: false``: the response is made, nothing is sampled; it can be continued."""
        events = plan.opening + plan.stream.finish(finished=True)
        record = plan.record(plan.stream.response)
        if plan.store:
            assert self.service.store is not None
            await self.service.store.put(record)
        self.local = {plan.id: record}
        for event in events:
            await self._send_json(event)

    async def _generate(self, plan: Plan, request_id: str) -> bool:
        gone = self._gone()
        disconnect = Disconnect(gone)
        job = await disconnect.race_or_close(plan.admit(self.service))
        last = 0

        async def pump() -> None:
            nonlocal last
            try:
                async for batch in self.responses.events(plan, job, request_id):
                    for event in batch:
                        last = event["sequence_number"]
                        await self._send_json(event)
            except (EngineError, ServerShuttingDown) as exc:  # as over HTTP
                for event in failed_stream(exc, plan.snapshot, last, request_id)[1]:
                    await self._send_json(event)
                return
            self.local = {plan.id: plan.record(plan.stream.response, job.tokens)}

        try:
            await disconnect.race(pump())
        finally:
            disconnect.close()
            await job.close()
        return True

    def _gone(self) -> Callable[[], Awaitable[Message]]:
        """A ``receive`` for :class:`Disconnect`: it ends when the client closes the socket.

        Requests are sequential: a frame that comes while a response streams waits
        in the backlog and is answered after it.
        """

        async def receive() -> Message:
            while True:
                message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    return {"type": "http.disconnect"}
                self._backlog.append(message)

        return receive

    async def _send_json(self, data: JsonDict) -> None:
        try:
            await self._send({"type": "websocket.send", "text": dumps(data).decode()})
        except (OSError, RuntimeError, WebSocketDisconnect):
            # The socket closed under us (the ASGI server's ClientDisconnected is an
            # OSError; Starlette refuses a send after the close): the client is gone.
            raise ClientGone from None


def error_frame(error: APIError) -> JsonDict:
    """An in-band error (the spec's ``WebSocketErrorEvent``): the HTTP status it stands
    for, and the error object an HTTP answer would carry."""
    return {"type": "error", "status": error.status, **error.body()}


async def deny(send: Callable[[Message], Awaitable[None]], scope: Any, error: APIError) -> None:
    """Refuse the upgrade with ``error``'s HTTP status and body (401 bad key, 426 off).

    Without the ASGI server's ``websocket.http.response`` extension the connection
    is closed instead (policy violation).
    """
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [(b"content-type", b"application/json")]
        headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
        start = {"type": "websocket.http.response.start", "status": error.status}
        await send({**start, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": error.json_bytes()})
    else:
        await send({"type": "websocket.close", "code": 1008})
