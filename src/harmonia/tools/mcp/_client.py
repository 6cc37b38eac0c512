"""Any MCP server as a harmony tool namespace.

:class:`McpToolset` connects to a server (a command spoken to over stdio, a
Streamable HTTP URL, or an SSE URL such as gpt-oss's reference servers), lists
its tools into a :class:`harmonia.ToolNamespaceConfig` (schemas tidied for
harmony's TypeScript rendering) and implements the :class:`Tool` protocol, so
a :class:`harmonia.tools.Toolbox` dispatches the model's calls to it.

The MCP session lives in a task of its own: the SDK's transports are anyio
context managers that must be left in the task that entered them, and this way
``aclose`` may be called from anywhere.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

from ... import InputError, ToolDescription, ToolError, ToolNamespaceConfig
from ..._runtime import TIMEOUTS, ClosedOnExit
from .._arguments import load_arguments
from .._base import ToolCall, ToolOutput
from .._schema import harmonize_schema

#: Seconds to wait for the server to start and answer the handshake and tool listing.
DEFAULT_CONNECT_TIMEOUT = TIMEOUTS.mcp_connect

Transport = Literal["stdio", "http", "sse"]


class McpToolset(ClosedOnExit):
    """An MCP server's tools as one harmony namespace (docs/tools.md says how it reads them).

    Build with :meth:`stdio`, :meth:`http` or :meth:`sse`, then connect with
    ``async with`` (or :meth:`connect` / :meth:`aclose`).
    """

    def __init__(
        self,
        transport: Transport,
        target: str | Sequence[str],
        *,
        namespace: str | None = None,
        headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if transport == "stdio" and (isinstance(target, str) or not target):
            raise InputError("an stdio MCP server is a command: pass [program, *arguments]")
        if transport != "stdio" and not isinstance(target, str):
            raise InputError(f"an {transport} MCP server is a URL string")
        self.transport = transport
        self.target = target if isinstance(target, str) else list(target)
        self._namespace = namespace
        self._headers = dict(headers or {})
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self.connect_timeout = connect_timeout
        self._client: Any = None
        self._config: ToolNamespaceConfig | None = None
        self._tools: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None
        # Made in connect(): an event belongs to the loop that first waits on it.
        self._closing: asyncio.Event | None = None
        self._error: BaseException | None = None

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        namespace: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> McpToolset:
        """A server started as a subprocess (``command`` = program and arguments)."""
        return cls(
            "stdio", command, namespace=namespace, env=env, cwd=cwd, connect_timeout=connect_timeout
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> McpToolset:
        """A server speaking Streamable HTTP at ``url`` (usually ending in ``/mcp``)."""
        return cls(
            "http", url, namespace=namespace, headers=headers, connect_timeout=connect_timeout
        )

    @classmethod
    def sse(cls, url: str, **options: Any) -> McpToolset:
        """A server speaking the older SSE transport at ``url`` (ending in ``/sse``); the
        keyword options of :meth:`http`."""
        return cls("sse", url, **options)

    def __repr__(self) -> str:
        # Headers may carry credentials: never shown.
        target = self.target if isinstance(self.target, str) else " ".join(self.target)
        return f"McpToolset({self.transport}, {target!r}, namespace={self._namespace!r})"

    # -- the Tool protocol ----------------------------------------------------

    @property
    def namespace(self) -> str:
        if self._namespace is not None:
            return self._namespace
        return self._connected_config().name

    def namespace_config(self) -> ToolNamespaceConfig:
        return self._connected_config()

    async def call(self, call: ToolCall) -> ToolOutput:
        config = self._connected_config()
        name = call.name if call.name is not None else config.name
        tool = self._tools.get(name)
        if tool is None:
            valid = [f"{config.name}.{t.name}" for t in config.tools]
            if config.name in self._tools:
                valid.append(config.name)
            raise ToolError(
                f"there is no tool {call.recipient!r}. Valid tools: {', '.join(valid) or 'none'}.",
                tool=call.recipient,
            )
        arguments = self._arguments(call, tool)
        from mcp import MCPError

        try:
            result = await self._client.call_tool(name, arguments)
        except MCPError as exc:
            raise ToolError(f"{call.recipient} failed: {exc}", tool=call.recipient) from None
        return _output(result)

    def _arguments(self, call: ToolCall, tool: Any) -> dict[str, Any]:
        schema = tool.input_schema or {}
        properties = schema.get("properties") or {}
        if call.name is None and len(properties) == 1:
            ((key, prop),) = properties.items()
            if isinstance(prop, dict) and prop.get("type") == "string":
                return {key: call.arguments}  # python: the message is the code
        return load_arguments(call, schema)

    async def aclose(self) -> None:
        """Close the session (and stop a stdio server). Safe to call twice."""
        task, self._task = self._task, None
        if task is None:
            return
        assert self._closing is not None
        self._closing.set()
        await asyncio.gather(task, return_exceptions=True)
        self._client = None

    # -- connecting -----------------------------------------------------------

    async def connect(self) -> McpToolset:
        """Start the session and read the tool listing; raises :class:`ToolError` on failure."""
        if self._task is not None:
            return self
        ready = asyncio.Event()
        closing = self._closing = asyncio.Event()
        self._error = None
        self._task = asyncio.create_task(self._session(ready, closing))
        try:
            await asyncio.wait_for(ready.wait(), self.connect_timeout)
        except asyncio.TimeoutError:
            await self.aclose()
            raise ToolError(
                f"the MCP server {self!r} did not answer within {self.connect_timeout:g} seconds"
            ) from None
        if self._error is not None:
            error = self._error
            await self.aclose()
            raise ToolError(f"cannot connect to the MCP server {self!r}: {error}") from error
        return self

    async def __aenter__(self) -> McpToolset:
        return await self.connect()

    async def _session(self, ready: asyncio.Event, closing: asyncio.Event) -> None:
        from mcp import Client

        try:
            async with Client(self._transport()) as client:
                self._client = client
                self._config = await self._read_tools(client)
                ready.set()
                await closing.wait()
        except Exception as exc:  # reported by connect(); a late failure ends the session
            self._error = exc
        finally:
            self._config = None if self._error is not None else self._config
            ready.set()

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        if self.transport == "stdio":
            from mcp import StdioServerParameters, stdio_client

            assert not isinstance(self.target, str)
            program, *args = self.target
            params = StdioServerParameters(command=program, args=args, env=self._env, cwd=self._cwd)
            return stdio_client(params)
        assert isinstance(self.target, str)
        if self.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(self.target, headers=self._headers or None)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers=self._headers or None)
        return streamable_http_client(self.target, http_client=http)

    async def _read_tools(self, client: Any) -> ToolNamespaceConfig:
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        info = client.server_info
        name = self._namespace or (info.name if info is not None else None)
        if not name:
            raise ToolError("the MCP server has no name; pass namespace=")
        self._tools = {t.name: t for t in tools}
        declared = [
            ToolDescription(t.name, t.description or "", harmonize_schema(t.input_schema or {}))
            for t in tools
            if t.name != name
        ]
        return ToolNamespaceConfig(name, client.instructions, declared)

    def _connected_config(self) -> ToolNamespaceConfig:
        if self._config is None or self._task is None:
            raise InputError(
                f"{self!r} is not connected: use 'async with toolset:' or await toolset.connect()"
            )
        return self._config


def _output(result: Any) -> ToolOutput:
    parts: list[str] = []
    images: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = _decoded_size(block.data)
            images.append({"type": kind, "mime_type": block.mime_type, "data": block.data})
            parts.append(f"[{kind} {block.mime_type}, {size} bytes]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri} (binary)]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    metadata: dict[str, Any] = {}
    if result.structured_content is not None:
        metadata["structured_content"] = result.structured_content
    if images:
        metadata["media"] = images
    return ToolOutput("\n".join(parts), metadata=metadata, is_error=bool(result.is_error))


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
