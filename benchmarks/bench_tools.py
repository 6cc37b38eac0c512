"""Benchmark the tool dispatcher: the overhead harmonia adds to every tool call.

Run it with the ``tools`` extra installed::

    python benchmarks/bench_tools.py            # ~5 s
    python benchmarks/bench_tools.py --calls 200 --rounds 5

Each case dispatches the same assistant message ``calls`` times inside one
event loop, ``rounds`` times, and prints the median time per call. The tools
do no work of their own, so the figures are the dispatcher's cost: resolving
the recipient, the timeout wrapper, building the reply; plus, for function
tools, parsing the JSON arguments, validating them against the schema,
converting them to the annotated types and (sync functions) the hop to a
worker thread.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Literal

from harmonia import Message, Role, ToolNamespaceConfig
from harmonia.tools import FunctionTools, Toolbox, ToolCall, ToolOutput, function_tool


class NoOpBrowser:
    """A runtime that answers at once: what is left is the dispatcher."""

    namespace = "browser"

    def __init__(self) -> None:
        self._config = ToolNamespaceConfig.browser()

    def namespace_config(self) -> ToolNamespaceConfig:
        return self._config

    async def call(self, call: ToolCall) -> ToolOutput:
        return ToolOutput("ok")

    async def aclose(self) -> None:
        pass


@function_tool
def get_weather(location: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Gets the weather.

    Args:
        location: The city.
    """
    return "sunny"


@function_tool
async def get_time(zone: str) -> dict[str, str]:
    """Gets the time in a zone."""
    return {"zone": zone, "time": "12:00"}


def _message(recipient: str, body: str) -> Message:
    message = Message.from_role_and_content(Role.ASSISTANT, body).with_recipient(recipient)
    return message.with_channel("commentary").with_content_type("<|constrain|>json")


CASES: list[tuple[str, Message]] = [
    ("no-op runtime (browser.search)", _message("browser.search", '{"query": "q"}')),
    ("alias functions.browser.search", _message("functions.browser.search", '{"query": "q"}')),
    ("sync function tool (thread hop)", _message("functions.get_weather", '{"location": "Oslo"}')),
    ("async function tool", _message("functions.get_time", '{"zone": "UTC"}')),
    ("schema violation reply", _message("functions.get_weather", '{"location": 5}')),
    ("invalid JSON reply", _message("functions.get_weather", '{"location": ')),
    ("unknown tool reply", _message("functions.nothing", "{}")),
]


def _time(box: Toolbox, message: Message, calls: int) -> float:
    async def run() -> float:
        await box.dispatch(message)  # warm caches (validators, declarations)
        start = time.perf_counter()
        for _ in range(calls):
            await box.dispatch(message)
        return (time.perf_counter() - start) / calls

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the median is shown)")
    args = parser.parse_args(argv)
    box = Toolbox([NoOpBrowser(), FunctionTools([get_weather, get_time])])
    width = max(len(name) for name, _ in CASES)
    print(f"dispatch overhead per call, median of {args.rounds} x {args.calls} calls")
    measure: Callable[[Message], float] = lambda m: _time(box, m, args.calls)  # noqa: E731
    for name, message in CASES:
        samples = [measure(message) for _ in range(args.rounds)]
        print(f"  {name:<{width}}  {statistics.median(samples) * 1e6:8.1f} µs")


if __name__ == "__main__":
    main()
