"""Small fake runtimes that follow the Tool protocol, for the dispatcher and MCP tests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import harmonia
from fake_tools import FakeRuntime
from harmonia import ToolError, ToolNamespaceConfig
from harmonia.tools import ToolCall, ToolOutput
from harmonia.tools._arguments import load_arguments


class FakeBrowser(FakeRuntime):
    """Answers search/open/find with text that echoes the arguments it understood."""

    namespace = "browser"
    config = ToolNamespaceConfig.browser

    async def call(self, call: ToolCall) -> ToolOutput:
        self.calls.append(call)
        schemas = {t.name: t.parameters for t in self.namespace_config().tools}
        if call.name not in schemas:
            raise ToolError(f"browser has no function {call.name!r}; valid: search, open, find")
        args = load_arguments(call, schemas[call.name])
        if call.name == "search":
            return ToolOutput(f"[{len(self.calls) - 1}] results for {args['query']}")
        if call.name == "find":
            return ToolOutput(f"found {args['pattern']!r}")
        return ToolOutput(f"opened {args.get('id', -1)}", metadata={"url": "file:///x"})


class FakePython(FakeRuntime):
    """A stateful 'kernel': remembers every source it was sent and answers with its length."""

    namespace = "python"
    config = ToolNamespaceConfig.python

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    async def call(self, call: ToolCall) -> ToolOutput:
        self.calls.append(call)
        self.sources.append(call.arguments)
        if "raise" in call.arguments:
            return ToolOutput("Traceback: boom", is_error=True)
        return ToolOutput(f"ran {len(call.arguments)} chars (call {len(self.sources)})\n")


class MisbehavingTool:
    """A namespace ``broken`` whose functions sleep, raise, or fail at close."""

    namespace = "broken"

    def namespace_config(self) -> ToolNamespaceConfig:
        tools = [harmonia.ToolDescription(n, n) for n in ("sleep", "crash", "refuse")]
        return ToolNamespaceConfig("broken", "Misbehaves.", tools)

    async def call(self, call: ToolCall) -> ToolOutput:
        if call.name == "sleep":
            await asyncio.sleep(10)
        if call.name == "crash":
            raise KeyError("secret-free detail")
        raise ToolError("refused: try 'sleep' instead", tool=call.recipient)

    async def aclose(self) -> None:
        raise OSError("close failed")


@pytest.fixture
def fake_browser() -> FakeBrowser:
    return FakeBrowser()


@pytest.fixture
def fake_python() -> FakePython:
    return FakePython()


@pytest.fixture
def misbehaving() -> MisbehavingTool:
    return MisbehavingTool()


# -- MCP helpers -------------------------------------------------------------

# A small MCP server written with the SDK's own high-level API, run by the
# tests as a subprocess (stdio) or in a thread (Streamable HTTP).
DEMO_SERVER = '''
import base64
from typing import Optional

from mcp.server import MCPServer
from mcp.types import ImageContent, TextContent

mcp = MCPServer("demo", instructions="Demo tools for tests.")


@mcp.tool()
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def greet(name: str, title: Optional[str] = None) -> str:
    """Greet someone."""
    return f"Hello, {title + ' ' if title else ''}{name}!"


@mcp.tool()
def picture() -> list:
    """Return text and an image."""
    png = base64.b64encode(b"\\x89PNG....").decode()
    return [TextContent(text="a chart"), ImageContent(data=png, mime_type="image/png")]


@mcp.tool()
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


if __name__ == "__main__":
    mcp.run()
'''


@pytest.fixture(scope="session")
def demo_server_script(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("mcp") / "demo_server.py"
    path.write_text(DEMO_SERVER)
    return str(path)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThreadedServer:
    """Serve an ASGI app with uvicorn in a thread on 127.0.0.1 and a free port."""

    def __init__(self, app: Any) -> None:
        import threading

        import uvicorn

        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadedServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test MCP server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve_app() -> type[ThreadedServer]:
    return ThreadedServer
