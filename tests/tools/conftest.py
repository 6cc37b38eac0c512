"""Small fake runtimes that follow the Tool protocol, for the dispatcher and MCP tests."""

from __future__ import annotations

import asyncio

import pytest

import harmonia
from harmonia import ToolError, ToolNamespaceConfig
from harmonia.tools import ToolCall, ToolOutput
from harmonia.tools._arguments import load_arguments


class FakeBrowser:
    """Answers search/open/find with text that echoes the arguments it understood."""

    namespace = "browser"

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.closed = False

    def namespace_config(self) -> ToolNamespaceConfig:
        return ToolNamespaceConfig.browser()

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

    async def aclose(self) -> None:
        self.closed = True


class FakePython:
    """A stateful 'kernel': remembers every source it was sent and answers with its length."""

    namespace = "python"

    def __init__(self) -> None:
        self.sources: list[str] = []
        self.closed = False

    def namespace_config(self) -> ToolNamespaceConfig:
        return ToolNamespaceConfig.python()

    async def call(self, call: ToolCall) -> ToolOutput:
        self.sources.append(call.arguments)
        if "raise" in call.arguments:
            return ToolOutput("Traceback: boom", is_error=True)
        return ToolOutput(f"ran {len(call.arguments)} chars (call {len(self.sources)})\n")

    async def aclose(self) -> None:
        self.closed = True


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
