"""A harmonia tool runtime served as an MCP server, the way vLLM's ``--tool-server`` reads one.

vLLM connects to ``http://HOST:PORT/sse`` (the SSE transport), takes the
server's name as the harmony namespace and its instructions as the namespace
description, declares the listed tools, and calls ``call_tool(name, args)``
reading ``result.content[0].text``. For ``python`` it calls the tool
``python`` with ``{"code": ...}`` and keeps it out of the prompt when its
annotations say ``include_in_prompt: false`` (gpt-oss's reference servers do
both). A ``x-session-id`` header, sent by vLLM, keys the per-conversation state
(browser cursors, a kernel), so one runtime is built per session.

The same app also answers Streamable HTTP on ``/mcp`` for other MCP clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from ... import ToolNamespaceConfig
from .._base import Tool, ToolCall
from .._dispatch import DEFAULT_TIMEOUT, Toolbox
from .._schema import object_schema

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from starlette.applications import Starlette

#: Runtimes kept at once, one per client session; the least recently used is closed beyond.
DEFAULT_MAX_SESSIONS = 64
#: The header vLLM sends to name a conversation.
SESSION_HEADER = "x-session-id"
#: The session id a Streamable HTTP client sends with each request of its session.
MCP_SESSION_HEADER = "mcp-session-id"
# The argument a namespace called as a whole (``python``) receives its text in,
# as in gpt-oss's python server and vLLM's client.
CODE_ARGUMENT = "code"

ToolFactory = Callable[[], Tool]


class McpToolServer:
    """Serve one harmonia runtime (or one per session, from a factory) over MCP.

    ``tool`` is a runtime instance (shared by every client) or a zero-argument
    factory (a class, a lambda) that builds one runtime per session, in the
    thread and event loop that serves it. ``config`` is the declaration to
    serve; without it, one runtime is built here to read it (and serves the
    first session if that comes from this thread: runtimes holding thread-bound
    resources, such as an SQLite connection, are never used from another).
    ``name`` and ``instructions`` default to the namespace and its description.
    """

    def __init__(
        self,
        tool: Tool | ToolFactory,
        *,
        config: ToolNamespaceConfig | None = None,
        name: str | None = None,
        instructions: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        # A class passes isinstance(cls, Tool) (the protocol checks attribute
        # names only), so a type is always a factory.
        self._factory: ToolFactory | None = None
        first: Tool | None = tool if isinstance(tool, Tool) else None
        if isinstance(tool, type) or first is None:
            self._factory = cast(ToolFactory, tool)
            first = self._factory() if config is None else None
        if config is None:
            assert first is not None
            config = first.namespace_config()
        self.config: ToolNamespaceConfig = config
        self.name = name or config.name
        self.instructions = instructions if instructions is not None else config.description
        self.timeout = timeout
        self.max_sessions = max_sessions
        # A factory's runtime built to read the declaration serves the first
        # session when that session is served from the thread that built it.
        self._spare = first if self._factory is not None else None
        self._spare_thread = threading.get_ident()
        shared = first if self._factory is None else None
        self._shared_box = None if shared is None else Toolbox([shared], timeout=timeout)
        self._sessions: OrderedDict[str, Toolbox] = OrderedDict()
        self._lock = asyncio.Lock()

    # -- what clients see -----------------------------------------------------

    def tool_listing(self) -> list[dict[str, Any]]:
        """The ``tools/list`` entries, as JSON (wire spelling)."""
        if not self.config.tools:
            # A namespace called as a whole (python): one tool of its own name
            # taking the text as ``code``, hidden from the prompt because the
            # harmony declaration of such a namespace has no functions.
            schema = object_schema({CODE_ARGUMENT: {"type": "string"}}, [CODE_ARGUMENT])
            return [
                {
                    "name": self.config.name,
                    "description": self.config.description or "",
                    "inputSchema": schema,
                    "annotations": {"include_in_prompt": False},
                }
            ]
        return [
            {
                "name": t.name,
                "description": t.description,
                "inputSchema": t.parameters or {"type": "object", "properties": {}},
            }
            for t in self.config.tools
        ]

    def hidden_tools(self) -> dict[str, dict[str, Any]]:
        """Annotations by tool name that mcp's typed models cannot carry (``include_in_prompt``)."""
        return {t["name"]: t["annotations"] for t in self.tool_listing() if "annotations" in t}

    def to_call(self, name: str, arguments: dict[str, Any] | None) -> ToolCall:
        """The harmony call an MCP ``tools/call`` stands for."""
        namespace = self.config.name
        args = arguments or {}
        if not self.config.tools and name == namespace:
            code = args.get(CODE_ARGUMENT, "")
            return ToolCall(namespace, namespace, None, str(code), content_type="code")
        return ToolCall(
            f"{namespace}.{name}", namespace, name, json.dumps(args), content_type="json"
        )

    # -- sessions -------------------------------------------------------------

    async def toolbox(self, session_key: str) -> Toolbox:
        """The toolbox (one runtime) of a session, built on first use."""
        if self._shared_box is not None:
            return self._shared_box
        async with self._lock:
            box = self._sessions.get(session_key)
            if box is not None:
                self._sessions.move_to_end(session_key)
                return box
            if self._spare is not None and threading.get_ident() == self._spare_thread:
                runtime, self._spare = self._spare, None
            else:
                assert self._factory is not None
                runtime = self._factory()
            box = Toolbox([runtime], timeout=self.timeout)
            self._sessions[session_key] = box
            evicted: list[Toolbox] = []
            while len(self._sessions) > self.max_sessions:
                evicted.append(self._sessions.popitem(last=False)[1])
        for old in evicted:
            await _close_quietly(old)
        return box

    async def aclose(self) -> None:
        """Close every runtime this server built (and the shared one)."""
        async with self._lock:
            boxes = list(self._sessions.values())
            self._sessions.clear()
            if self._spare is not None:
                boxes.append(Toolbox([self._spare]))
                self._spare = None
        if self._shared_box is not None:
            boxes.append(self._shared_box)
        for box in boxes:
            await _close_quietly(box)

    # -- the MCP server -------------------------------------------------------

    def lowlevel_server(self) -> Server[Any]:
        """An ``mcp.server.lowlevel.Server`` answering ``tools/list`` and ``tools/call``."""
        import mcp_types as types
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            tools = [
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["inputSchema"]
                )
                for t in self.tool_listing()
            ]
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: Any) -> Any:
            box = await self.toolbox(_session_key(ctx))
            call = self.to_call(params.name, params.arguments)
            if call.name is not None and call.name not in {t.name for t in self.config.tools}:
                valid = ", ".join(t["name"] for t in self.tool_listing())
                text = f"Error: there is no tool {params.name!r}. Valid tools: {valid}."
                return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
            output = await box.run(call)
            return types.CallToolResult(
                content=[types.TextContent(text=output.text)], is_error=output.is_error
            )

        return Server(
            self.name,
            instructions=self.instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    def http_app(self, *, host: str = "127.0.0.1") -> Starlette:
        """A Starlette app serving SSE (``/sse``, ``/messages/``) and Streamable HTTP (``/mcp``)."""
        from mcp.server.sse import SseServerTransport
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Mount, Route

        server = self.lowlevel_server()
        app = server.streamable_http_app(host=host)
        security = _security(host)
        sse = SseServerTransport("/messages/", security_settings=security)

        async def handle_sse(request: Request) -> Response:
            async with sse.connect_sse(request.scope, request.receive, request._send) as streams:
                writer = _AnnotatingWriter(streams[1], self.hidden_tools())
                await server.run(streams[0], writer, server.create_initialization_options())
            return Response()

        app.router.routes.append(Route("/sse", endpoint=handle_sse, methods=["GET"]))
        app.router.routes.append(Mount("/messages/", app=sse.handle_post_message))
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(a: Any) -> AsyncIterator[Any]:
            async with inner(a) as state:
                try:
                    yield state
                finally:
                    await self.aclose()

        app.router.lifespan_context = lifespan
        return app

    async def serve_http(self, *, host: str = "127.0.0.1", port: int = 8001) -> None:
        """Serve :meth:`http_app` with uvicorn until cancelled."""
        import uvicorn

        config = uvicorn.Config(self.http_app(host=host), host=host, port=port, log_level="warning")
        await uvicorn.Server(config).serve()

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin/stdout."""
        from mcp.server.stdio import stdio_server

        server = self.lowlevel_server()
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await self.aclose()


class _AnnotatingWriter:
    """The server's outgoing stream, adding annotations to a ``tools/list`` result.

    mcp 2 validates every result against the protocol's typed models, which
    drop unknown annotation keys; gpt-oss's servers (mcp 1) sent
    ``include_in_prompt`` and vLLM reads it, so it is put back on the way out.
    """

    def __init__(self, inner: Any, annotations: dict[str, dict[str, Any]]) -> None:
        self._inner = inner
        self._annotations = annotations

    async def send(self, item: Any) -> None:
        result = getattr(getattr(item, "message", None), "result", None)
        if self._annotations and isinstance(result, dict):
            for tool in result.get("tools") or ():
                if not isinstance(tool, dict):
                    continue
                extra = self._annotations.get(str(tool.get("name")))
                if extra:
                    tool["annotations"] = {**(tool.get("annotations") or {}), **extra}
        await self._inner.send(item)

    async def __aenter__(self) -> _AnnotatingWriter:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _session_key(ctx: Any) -> str:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    # vLLM's session header first; without it, one session per MCP connection
    # (Streamable HTTP names its sessions).
    for header, prefix in ((SESSION_HEADER, "h"), (MCP_SESSION_HEADER, "m")):
        if headers is not None and (value := headers.get(header)):
            return f"{prefix}:{value}"
    # An SSE stream or stdio: the SDK builds a session object per request, but its
    # connection's outbound channel lasts as long as the connection. The key is a
    # fresh id kept on that channel (an object's id() may be reused by a later
    # connection, which must never see an earlier one's pages or kernel).
    channel = getattr(getattr(ctx.session, "_connection", None), "outbound", None)
    key = getattr(channel, "_harmonia_session_key", None)
    if key is None:
        key = f"c:{uuid.uuid4().hex}"
        with contextlib.suppress(AttributeError):  # no such channel: one runtime per call
            channel._harmonia_session_key = key  # type: ignore[union-attr]
    return str(key)


def _security(host: str) -> Any:
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


async def _close_quietly(box: Toolbox) -> None:
    try:
        await box.aclose()
    except Exception:  # one runtime's failure to close must not stop the others
        import logging

        logging.getLogger("harmonia.tools").warning("closing an MCP session failed", exc_info=True)
