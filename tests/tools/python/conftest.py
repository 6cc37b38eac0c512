"""Shared fixtures for the python tool's tests.

Kernels are bound to an event loop, and starting one costs about a second, so
every test here drives its coroutines on one background loop (``aio.run``)
and tests that need no isolation share one session (``shared``). The session
fixture closes every tool it handed out and checks that no process of theirs
is left.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import psutil
import pytest

from harmonia.tools.python import PythonTool, PythonToolConfig, sandbox_status

T = TypeVar("T")

# Short enough for the suite's time budget, long enough for a loaded machine.
TIMEOUT_S = 3.0
GRACE_S = 1.0


class Loop:
    """An event loop on its own thread; ``run`` waits for a coroutine from test code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def kernel_processes(tool: PythonTool) -> list[psutil.Process]:
    """The running kernel's outermost process and everything under it."""
    pid = tool.kernel_pid
    if pid is None:
        return []
    top = psutil.Process(pid)
    return [top, *top.children(recursive=True)]


class Tools:
    """Makes tools on the shared loop and closes them, checking nothing is left running."""

    def __init__(self, aio: Loop) -> None:
        self.aio = aio
        self._open: list[PythonTool] = []

    def make(self, **config: Any) -> PythonTool:
        settings: dict[str, Any] = {"timeout": TIMEOUT_S, "interrupt_grace": GRACE_S}
        settings.update(config)
        tool = PythonTool(PythonToolConfig(**settings))
        self._open.append(tool)
        return tool

    def close(self, tool: PythonTool) -> None:
        processes = kernel_processes(tool)
        self.aio.run(tool.aclose())
        _, alive = psutil.wait_procs(processes, timeout=5)
        assert not alive, f"processes left after close: {alive}"

    def close_all(self) -> None:
        for tool in self._open:
            self.close(tool)
        self._open.clear()


@pytest.fixture(scope="session")
def timing() -> tuple[float, float]:
    """(timeout, interrupt grace) of the tools made here, in seconds."""
    return TIMEOUT_S, GRACE_S


@pytest.fixture(scope="session")
def aio() -> Iterator[Loop]:
    loop = Loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def sandbox() -> None:
    """Skip, with the probe's own explanation, where the sandbox cannot start."""
    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"python tool sandbox unavailable: {status.reason}")


@pytest.fixture(scope="session")
def tools(aio: Loop) -> Iterator[Tools]:
    made = Tools(aio)
    yield made
    made.close_all()


@pytest.fixture(scope="session")
def shared(sandbox: None, tools: Tools) -> PythonTool:
    """One sandboxed session for the tests where isolation is not the point."""
    tool = tools.make()
    tools.aio.run(tool.start())
    return tool


@pytest.fixture
def run(aio: Loop, shared: PythonTool) -> Any:
    """``run(code)`` -> ToolOutput, in the shared session."""

    def _run(code: str, timeout: float = 60.0) -> Any:
        return aio.run(shared.run(code), timeout)

    return _run
