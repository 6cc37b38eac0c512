"""Shared helpers for the agent tests: scripted model turns, spy runtimes, the corpus."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_tools import FakeRuntime
from harmonia import HarmonyEncoding, ToolError, ToolNamespaceConfig
from harmonia.tools import ToolCall, ToolOutput

CORPUS = Path(__file__).resolve().parents[2] / "examples" / "corpus"


class Turns:
    """Encodes scripted completions (the model's side) with the real tokenizer."""

    def __init__(self, enc: HarmonyEncoding) -> None:
        self.enc = enc

    def __call__(self, text: str) -> tuple[int, ...]:
        return tuple(self.enc.encode(text, allowed_special="all"))


@pytest.fixture
def turns(enc: HarmonyEncoding) -> Turns:
    return Turns(enc)


@pytest.fixture(scope="session")
def corpus() -> Path:
    return CORPUS


class FakePython(FakeRuntime):
    """A python runtime that evaluates one expression per call and records every call.

    The real sandboxed kernel is used in its own test; this one keeps the others fast.
    """

    namespace = "python"
    config = ToolNamespaceConfig.python

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay

    async def call(self, call: ToolCall) -> ToolOutput:
        self.calls.append(call)
        if self.delay:
            await asyncio.sleep(self.delay)
        try:
            value = eval(call.arguments, {"__builtins__": {}})
        except Exception as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None
        return ToolOutput(f"{value}\n")


@pytest.fixture
def fake_python() -> Callable[..., FakePython]:
    return FakePython


class Spy:
    """Wraps a runtime and records the calls that reached it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.namespace = inner.namespace
        self.calls: list[ToolCall] = []

    def namespace_config(self) -> ToolNamespaceConfig:
        config: ToolNamespaceConfig = self.inner.namespace_config()
        return config

    async def call(self, call: ToolCall) -> ToolOutput:
        self.calls.append(call)
        output: ToolOutput = await self.inner.call(call)
        return output

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def spy() -> Callable[[Any], Spy]:
    return Spy


#: The real gpt-oss vocabulary size (logits per step).


@pytest.fixture(scope="session")
def random_gptoss() -> Iterator[Any]:
    """A randomly initialised gpt-oss: real vocabulary, 2 layers, hidden 64, 4 experts.

    Torch runs on one thread while it is in use: on this shared 2-core machine, two
    threads fighting over a model this small make each step 5 to 30 times slower.
    """
    torch = pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    pytest.importorskip(
        "transformers", reason="transformers is not installed (harmonia[transformers])"
    )
    from harmonia.engines.transformers import random_gpt_oss

    model = random_gpt_oss(seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield model
    finally:
        torch.set_num_threads(threads)
