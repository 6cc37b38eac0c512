"""The ASGI application: routes, API keys, request ids, errors in OpenAI's shape."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.websockets import WebSocket

from .._runtime import new_id
from ..engines import Engine
from ._asgi import ClientGone, error_response, json_response, track_outcome
from ._chat import chat_completions
from ._config import ServerConfig
from ._errors import APIError, from_exception
from ._metrics import SharedMetrics
from ._responses import Responses
from ._service import Service, log, logged_error
from ._shutdown import Shutdown
from ._store import SINGLE_TENANT, ResponseStore, tenant_id
from ._tool_loop import ToolLoop
from ._websocket import ResponsesSocket, deny

_REQUEST_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
Handler = Callable[[], Awaitable[Response]]


def build_app(
    engine: Engine,
    config: ServerConfig | None,
    store: ResponseStore | None,
    tool_loop: ToolLoop | None,
) -> FastAPI:
    """:func:`harmonia.serve.create_app`'s app (FastAPI is imported here, and only here)."""
    config = config or ServerConfig()
    service = Service(engine, config, store)
    responses = Responses(service, tool_loop)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        starting = asyncio.ensure_future(service.start())
        publishing = None if shared is None else asyncio.ensure_future(publish_metrics())
        try:
            yield
        finally:
            starting.cancel()
            if publishing is not None:
                publishing.cancel()
            await responses.aclose()
            await service.aclose()

    app = _App(title="harmonia", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.responses = responses
    app.state.shutdown = Shutdown(service, responses)

    async def guarded(request: Request, handler: Handler) -> Response:
        request_id = request.state.request_id
        try:
            return await handler()
        except ClientGone:
            service.note_disconnect()
            log.info("[%s] client disconnected; generation cancelled", request_id)
            return Response(status_code=499)
        except Exception as exc:
            return error_response(logged_error(exc, request_id))

    Action = Callable[[Request, str], Awaitable[Response]]

    def posted(action: Action) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await guarded(request, lambda: action(request, request.state.request_id))

        return endpoint

    def by_id(action: Action) -> Action:
        async def endpoint(request: Request, response_id: str) -> Response:
            return await guarded(request, lambda: action(request, response_id))

        return endpoint

    app.post("/v1/chat/completions")(posted(functools.partial(chat_completions, service)))
    app.post("/v1/responses")(posted(responses.create))
    app.post("/v1/responses/compact")(posted(responses.compact))

    @app.websocket("/v1/responses")
    async def responses_socket(websocket: WebSocket) -> None:
        scope = websocket.scope
        state = scope["state"]
        await websocket.receive()  # websocket.connect
        if not config.websocket:
            await deny(websocket.send, scope, _websocket_off())
            return
        tenant = state.get("tenant")
        if tenant is None:
            await deny(websocket.send, scope, _bad_key())
            return
        await websocket.accept()
        log.info("[%s] WebSocket /v1/responses open", state["request_id"])
        socket = ResponsesSocket(
            responses, tenant, state["request_id"], websocket.receive, websocket.send
        )
        await socket.run()
        log.info("[%s] WebSocket /v1/responses closed", state["request_id"])

    @app.get("/v1/responses")
    async def responses_get(request: Request) -> Response:
        # An upgrade the ASGI server did not take (no WebSocket library) arrives as a
        # plain GET: 426 tells Codex at once to use HTTP.
        if request.headers.get("upgrade", "").lower() == "websocket":
            return error_response(_websocket_off())
        return error_response(APIError(405, "method not allowed", code="unknown_route"))

    app.get("/v1/responses/{response_id}")(by_id(responses.retrieve))
    app.delete("/v1/responses/{response_id}")(by_id(responses.delete))
    app.post("/v1/responses/{response_id}/cancel")(by_id(responses.cancel))
    app.get("/v1/responses/{response_id}/input_items")(by_id(responses.input_items))

    def model_object(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 0, "owned_by": "harmonia"}

    @app.get("/v1/models")
    async def models() -> Response:
        return json_response(
            {"object": "list", "data": [model_object(name) for name in config.model_names]}
        )

    @app.get("/v1/models/{model}")
    async def model(request: Request, model: str) -> Response:
        async def one() -> Response:
            service.check_model(model)
            return json_response(model_object(model))

        return await guarded(request, one)

    @app.get("/health")
    async def health() -> Response:
        # Readiness: 503 while starting, shutting down, or with the engine's server down.
        reason = await service.readiness()
        if reason is None:
            return json_response({"status": "ok", "engine": engine.name})
        return json_response(
            {"status": "unavailable", "reason": reason}, status=503, headers={"Retry-After": "1"}
        )

    @app.get("/health/live")
    async def live() -> Response:
        # Liveness: the process answers (even while it drains or its engine is down).
        return json_response({"status": "alive"})

    shared = (
        None
        if config.metrics_dir is None
        else SharedMetrics(config.metrics_dir, config.worker_index or 0)
    )

    def gauges() -> dict[str, float]:
        admission = service.admission
        return {
            "harmonia_generations_running": admission.running,
            "harmonia_queue_depth": admission.waiting,
            "harmonia_background_responses": len(responses.background),
            "harmonia_ready": int(service.serving),
        }

    async def publish_metrics() -> None:
        """A worker's numbers, for the worker that answers the next scrape (every second)."""
        assert shared is not None
        while True:
            with contextlib.suppress(OSError):
                engine_counters = {n: read() for n, read in _engine_counters(engine).items()}
                shared.publish(service.metrics, {**gauges(), **engine_counters})
            await asyncio.sleep(1.0)

    @app.get("/metrics")
    async def metrics() -> Response:
        counters, values = service.metrics, gauges()
        engine_counters = {name: read() for name, read in _engine_counters(engine).items()}
        values.update(engine_counters)
        if shared is not None:  # --workers N: the sum of them all
            shared.publish(counters, values)
            counters, values = shared.combined(counters, values, lowest=("harmonia_ready",))
        read = {name: functools.partial(float, v) for name, v in values.items()}
        text = counters.render(
            {name: f for name, f in read.items() if name not in engine_counters},
            {name: f for name, f in read.items() if name in engine_counters},
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        message = {404: f"no route {request.url.path!r}", 405: "method not allowed"}.get(
            exc.status_code, str(exc.detail)
        )
        return error_response(APIError(exc.status_code, message, code="unknown_route"))

    if config.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(_Guard, config=config, service=service)
    return app


def _websocket_off() -> APIError:
    return APIError(
        426,
        "WebSocket mode is off on this server (--no-websocket, or no WebSocket library: "
        "pip install 'uvicorn[standard]'); use HTTP POST /v1/responses",
        code="websocket_unavailable",
    )


def _bad_key() -> APIError:
    return APIError(
        401, "missing or invalid API key: send Authorization: Bearer <key>", code="invalid_api_key"
    )


class _App(FastAPI):
    """The app, keeping the server's own ``send`` for the SSE writer's body chunks: past
    every middleware's per-message wrapper, the framework's outermost one included (they
    act on the response start only, which still goes through all of them)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        scope["harmonia.body_send"] = send
        try:
            await super().__call__(scope, receive, send)
        finally:
            # ``send`` holds the server's request cycle, which holds ``scope``: a cycle
            # that left each request's state to the cyclic collector (issue 34).
            scope.pop("harmonia.body_send", None)


class _Guard:
    """Pure ASGI (no per-chunk cost): request ids, API keys, access log, metrics, a last 500.

    An authorized ``/v1/`` request gets its key's tenant in the request state
    (``""`` without API keys); the routes scope every stored object by it.
    """

    def __init__(self, app: Any, config: ServerConfig, service: Service) -> None:
        self.app = app
        self.keys = [key.encode() for key in config.api_keys]
        self.tenants = [tenant_id(key) for key in config.api_keys]  # once: a slow hash
        index = config.worker_index
        # With --workers N, which process answered (for operators and the tests).
        self.worker = () if index is None else ((b"x-harmonia-worker", str(index).encode()),)
        self.service = service

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.fullmatch(given) else new_id("req", 8)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        v1 = scope["path"].startswith("/v1/")
        tenant = SINGLE_TENANT if not self.keys else self._tenant(headers) if v1 else None
        if tenant is not None:  # the open routes (/health, /metrics) belong to no tenant
            state["tenant"] = tenant
        if scope["type"] == "websocket":
            # The route refuses a bad key on the upgrade (401) and counts each request
            # made over the socket; the connection itself is only logged.
            log.info("[%s] WebSocket upgrade %s", request_id, scope["path"])
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        outcome = track_outcome()
        status = 500
        started = time.monotonic()
        response_started = False

        async def send_wrapper(message: Any) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"x-request-id", request_id.encode()),
                    *self.worker,
                ]
            await send(message)

        try:
            if tenant is None and v1:
                await error_response(_bad_key())(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        except Exception:
            log.exception("[%s] unhandled error", request_id)
            if not response_started:
                await error_response(from_exception(RuntimeError()))(scope, receive, send_wrapper)
        finally:
            by_id = path.startswith("/v1/responses/") and path != "/v1/responses/compact"
            route = "/v1/responses/{id}" if by_id else path
            status = outcome.get("status", status)  # a stream that failed after its 200
            self.service.metrics.request(route, status)
            ms = (time.monotonic() - started) * 1000
            log.info("[%s] %s %s %d %.1f ms", request_id, scope["method"], path, status, ms)

    def _tenant(self, headers: dict[bytes, bytes]) -> str | None:
        """The tenant of the request's key; ``None``: no key, or not one of ours."""
        value = headers.get(b"authorization", b"")
        if not value.startswith(b"Bearer "):
            return None
        token = value[7:].strip()
        # Compare against every key, each in constant time: no early exit that leaks which.
        found = None
        for key, tenant in zip(self.keys, self.tenants, strict=True):
            if hmac.compare_digest(token, key):
                found = tenant
        return found


#: What an engine counts about itself, by attribute, and its name in /metrics.
_ENGINE_COUNTERS = {
    # ids a server's stream left out that the engine recovered exactly (llama.cpp)
    "recovered_ids": "harmonia_engine_recovered_ids_total",
    # end ids a server got wrong under a grammar that the engine replaced (llama.cpp)
    "repaired_ends": "harmonia_engine_repaired_ends_total",
}


def _engine_counters(engine: Any) -> dict[str, Callable[[], float]]:
    """The engine's own counters that it has (engines without them show none)."""
    found: dict[str, Callable[[], float]] = {}
    for attribute, name in _ENGINE_COUNTERS.items():
        if isinstance(getattr(engine, attribute, None), int):
            found[name] = functools.partial(getattr, engine, attribute)
    return found
