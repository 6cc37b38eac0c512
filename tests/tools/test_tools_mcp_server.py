"""MCP server direction: harmonia runtimes served the way vLLM's --tool-server reads them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

import harmonia
from harmonia import Message, Role, ToolNamespaceConfig
from harmonia.tools import Toolbox
from harmonia.tools.mcp import McpToolServer, McpToolset

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")


async def _vllm_style_session(
    url: str, session_id: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[Any, ...]:
    """What vLLM's MCPToolServer does: SSE at /sse, x-session-id header, content[0].text."""
    from mcp import Client
    from mcp.client.sse import sse_client

    async with Client(sse_client(url, headers={"x-session-id": session_id})) as client:
        listing = await client.list_tools()
        texts = []
        for name, args in calls:
            result = await client.call_tool(name, args)
            block: Any = result.content[0]
            texts.append((block.text, result.is_error))
        return client.server_info, client.instructions, listing.tools, texts


def test_browser_server_answers_like_the_gpt_oss_reference(
    fake_browser: Any, serve_app: Any
) -> None:
    server = McpToolServer(type(fake_browser))  # a factory: one runtime per session
    reference = ToolNamespaceConfig.browser()
    with serve_app(server.http_app()) as http:
        url = f"{http.base}/sse"

        async def main() -> list[Any]:
            first = await _vllm_style_session(
                url, "conv-1", [("search", {"query": "tides"}), ("find", {"pattern": "moon"})]
            )
            again = await _vllm_style_session(url, "conv-1", [("search", {"query": "surf"})])
            other = await _vllm_style_session(
                url,
                "conv-2",
                [("search", {"query": "x"}), ("search", {"query": 3}), ("scroll", {})],
            )
            return [first, again, other]

        first, again, other = asyncio.run(asyncio.wait_for(main(), 30))
    info, instructions, tools, texts = first
    assert info.name == "browser"
    assert instructions == reference.description
    assert [(t.name, t.description, t.input_schema) for t in tools] == [
        (t.name, t.description, t.parameters) for t in reference.tools
    ]
    assert texts == [("[0] results for tides", False), ("found 'moon'", False)]
    # the same x-session-id reaches the same runtime (its call counter goes on)
    assert again[3] == [("[2] results for surf", False)]
    # another session has its own runtime; errors come back as error results
    assert other[3][0] == ("[0] results for x", False)
    assert other[3][1][1] is True and "at $.query: 3 is not of type 'string'" in other[3][1][0]
    assert other[3][2] == (
        "Error: there is no tool 'scroll'. Valid tools: search, open, find.",
        True,
    )


class RawSse:
    """A bare SSE MCP client: what reaches the wire, before any SDK model parses it."""

    def __init__(self, port: int) -> None:
        import http.client

        self.port = port
        self.stream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.stream.request("GET", "/sse", headers={"Accept": "text/event-stream"})
        self.response = self.stream.getresponse()
        self.endpoint = self._event()[1]

    def _event(self) -> tuple[str, str]:
        name, data = "", ""
        while True:
            line = self.response.readline().decode().rstrip("\r\n")
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif not line and name:
                return name, data

    def request(self, body: dict[str, Any]) -> dict[str, Any] | None:
        import http.client

        post = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        post.request("POST", self.endpoint, json.dumps(body), {"Content-Type": "application/json"})
        post.getresponse().read()
        post.close()
        if "id" not in body:
            return None
        while True:
            name, data = self._event()
            if name == "message":
                message: dict[str, Any] = json.loads(data)
                if message.get("id") == body["id"]:
                    return message

    def close(self) -> None:
        self.stream.close()


def test_python_tool_is_hidden_from_the_prompt_on_the_wire(
    fake_python: Any, serve_app: Any
) -> None:
    server = McpToolServer(fake_python)  # an instance: shared by every session
    with serve_app(server.http_app()) as http:
        raw = RawSse(http.port)
        try:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}  # fmt: skip
            reply = raw.request(init)
            raw.request({"jsonrpc": "2.0", "method": "notifications/initialized"})
            listing = raw.request({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            called = raw.request(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "python", "arguments": {"code": "x=1"}},
                }
            )
        finally:
            raw.close()
    assert reply is not None and reply["result"]["serverInfo"]["name"] == "python"
    assert reply["result"]["instructions"] == ToolNamespaceConfig.python().description
    assert listing is not None
    [tool] = listing["result"]["tools"]
    assert tool["name"] == "python"
    assert tool["inputSchema"]["properties"] == {"code": {"type": "string"}}
    # vLLM and gpt-oss's build-system-prompt drop tools annotated like this
    assert tool["annotations"] == {"include_in_prompt": False}
    assert called is not None
    assert called["result"]["content"] == [{"type": "text", "text": "ran 3 chars (call 1)\n"}]
    assert fake_python.sources == ["x=1"]


def test_harmonia_client_sees_the_reference_declarations(
    enc: harmonia.HarmonyEncoding, fake_browser: Any, fake_python: Any, serve_app: Any
) -> None:
    browser = McpToolServer(type(fake_browser))
    python = McpToolServer(fake_python)
    with serve_app(browser.http_app()) as b, serve_app(python.http_app()) as p:

        async def main() -> tuple[Any, ...]:
            async with (
                McpToolset.sse(f"{b.base}/sse") as web,
                McpToolset.http(f"{p.base}/mcp") as py,
                Toolbox([web, py]) as box,
            ):
                system = harmonia.SystemContent.new()
                for config in box.system_tools():
                    system = system.with_tools(config)
                call = Message.from_role_and_content(Role.ASSISTANT, "print('hi')\n")
                reply = await box.dispatch(call.with_recipient("python").with_channel("analysis"))
                search = Message.from_role_and_content(Role.ASSISTANT, '{"query": "q"}')
                found = await box.dispatch(
                    search.with_recipient("functions.browser.search").with_channel("analysis")
                )
                return system, reply, found

        system, reply, found = asyncio.run(asyncio.wait_for(main(), 30))
    expected = harmonia.SystemContent.new().with_browser_tool().with_python_tool()
    assert system == expected  # the prompt vLLM would render is the reference one
    assert fake_python.sources == ["print('hi')\n"]
    assert reply.author.name == "python" and reply.text == "ran 12 chars (call 1)\n"
    assert found.author.name == "browser.search" and found.text == "[0] results for q"
    assert enc.parse_messages_from_completion_tokens(enc.render(found), role=None) == [found]


STDIO_SERVER = """
import asyncio
from harmonia import ToolNamespaceConfig
from harmonia.tools import ToolOutput
from harmonia.tools.mcp import McpToolServer

class Echo:
    namespace = "python"
    def namespace_config(self):
        return ToolNamespaceConfig.python()
    async def call(self, call):
        return ToolOutput("echo: " + call.arguments)
    async def aclose(self):
        pass

asyncio.run(McpToolServer(Echo).serve_stdio())
"""


def test_stdio_server_round_trip(tmp_path: Path) -> None:
    script = tmp_path / "serve_python.py"
    script.write_text(STDIO_SERVER)
    src = str(Path(harmonia.__file__).parent.parent)
    env = {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}

    async def main() -> Message | None:
        toolset = McpToolset.stdio([sys.executable, str(script)], env=env, connect_timeout=20)
        async with toolset, Toolbox([toolset]) as box:
            assert toolset.namespace_config() == ToolNamespaceConfig.python()
            call = Message.from_role_and_content(Role.ASSISTANT, "1 + 1")
            return await box.dispatch(call.with_recipient("functions.python").with_channel("x"))

    reply = asyncio.run(asyncio.wait_for(main(), 30))
    assert reply is not None and reply.text == "echo: 1 + 1" and reply.author.name == "python"


def test_sessions_are_bounded_and_closed(fake_browser: Any) -> None:
    built: list[Any] = []

    def factory() -> Any:
        built.append(type(fake_browser)())
        return built[-1]

    server = McpToolServer(factory, max_sessions=2)

    async def main() -> None:
        a = await server.toolbox("a")
        assert await server.toolbox("a") is a
        await server.toolbox("b")
        await server.toolbox("c")  # evicts "a", the least recently used
        assert built[0].closed and not built[1].closed and not built[2].closed
        await server.aclose()

    asyncio.run(main())
    assert len(built) == 3  # the runtime built for the declaration served session "a"
    assert all(runtime.closed for runtime in built)


def test_shared_instance_is_used_by_every_session(fake_python: Any) -> None:
    server = McpToolServer(fake_python)

    async def main() -> None:
        assert await server.toolbox("a") is await server.toolbox("b")
        await server.aclose()

    asyncio.run(main())
    assert fake_python.closed
    assert server.to_call("python", {"code": "1"}).arguments == "1"


class ThreadBound:
    """Like a runtime holding an SQLite connection: usable only in the thread that built it."""

    namespace = "bound"
    built: ClassVar[list[ThreadBound]] = []

    def __init__(self) -> None:
        import threading

        self.thread = threading.get_ident()
        ThreadBound.built.append(self)

    def namespace_config(self) -> ToolNamespaceConfig:
        return ToolNamespaceConfig("bound", "Thread-bound.", [harmonia.ToolDescription("t", "T")])

    async def call(self, call: Any) -> Any:
        import threading

        from harmonia.tools import ToolOutput

        return ToolOutput(f"same thread: {threading.get_ident() == self.thread}")

    async def aclose(self) -> None:
        pass


def test_runtimes_are_built_in_the_serving_thread(serve_app: Any) -> None:
    ThreadBound.built.clear()
    probe_only = McpToolServer(ThreadBound)  # built here to read the declaration
    declared = McpToolServer(ThreadBound, config=ThreadBound().namespace_config())
    for server in (probe_only, declared):
        with serve_app(server.http_app()) as http:

            async def main(base: str = http.base) -> list[tuple[str, bool]]:
                return list((await _vllm_style_session(f"{base}/sse", "s", [("t", {})]))[3])

            assert asyncio.run(asyncio.wait_for(main(), 20)) == [("same thread: True", False)]
    assert len(ThreadBound.built) == 4  # probe, declaration, and one per served session


def test_a_client_without_session_header_keeps_one_runtime_per_connection(
    fake_browser: Any, serve_app: Any
) -> None:
    # Clients other than vLLM send no x-session-id: each MCP connection (an SSE
    # stream, a Streamable HTTP session) is then one session, whose state (the
    # browser's pages and cursors) lasts across its calls.
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    server = McpToolServer(type(fake_browser))
    with serve_app(server.http_app()) as http:

        async def calls(transport: Any) -> list[str]:
            async with Client(transport) as client:
                texts = []
                for query in ("a", "b"):
                    result = await client.call_tool("search", {"query": query})
                    texts.append(result.content[0].text)  # type: ignore[union-attr]
                return texts

        async def main() -> list[list[str]]:
            return [
                await calls(sse_client(f"{http.base}/sse")),
                await calls(streamable_http_client(f"{http.base}/mcp")),
                await calls(sse_client(f"{http.base}/sse")),
            ]

        sse, streamable, other = asyncio.run(asyncio.wait_for(main(), 30))
    assert sse == ["[0] results for a", "[1] results for b"]
    assert streamable == ["[0] results for a", "[1] results for b"]
    assert other == ["[0] results for a", "[1] results for b"]  # a new connection starts fresh
