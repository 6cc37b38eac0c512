"""What the agent loop costs on top of the engine: ``python benchmarks/bench_agent.py``.

A scripted engine replays a 4-step turn (a function call, then a long answer) with
no pacing, so the time is the loop's own: rendering each step's prompt, parsing
every id with the streaming parser, events, the tool dispatch. Quoted: the median
run, and per completion token next to a bare StreamableParser over the same ids.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from harmonia import HarmonyEncodingName, Role, StreamableParser, load_harmony_encoding
from harmonia.agent import Agent, new_conversation
from harmonia.engines import Script, ScriptedEngine
from harmonia.tools import FunctionTools, Toolbox, function_tool

RUNS = 15


@function_tool
def lookup(key: str) -> str:
    """Looks a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def main() -> None:
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    box = Toolbox([FunctionTools([lookup])])
    call = (
        "<|channel|>analysis<|message|>I need to look this up.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json"
        '<|message|>{"key": "k"}<|call|>'
    )
    answer = "<|channel|>final<|message|>" + "The tide turns twice a day. " * 250 + "<|return|>"
    steps = [tuple(enc.encode(t, allowed_special="all")) for t in (call, call, call, answer)]
    chunks = 4  # ids per chunk, as a server streams them
    conversation = new_conversation("Look it up.", toolbox=box)

    async def one() -> tuple[float, int]:
        engine = ScriptedEngine([Script(s, chunk_size=chunks) for s in steps])
        start = time.perf_counter()
        result = await Agent(engine, box, encoding=enc).run(conversation).result()
        took = time.perf_counter() - start
        assert result.answer is not None
        return took, result.usage.completion_tokens

    async def all_runs() -> list[tuple[float, int]]:
        return [await one() for _ in range(RUNS)]

    runs = asyncio.run(all_runs())
    tokens = runs[0][1]
    median = statistics.median(t for t, _ in runs)

    bare = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for step in steps:
            parser = StreamableParser(enc, Role.ASSISTANT)
            for token in step:
                parser.feed(token)
        bare.append(time.perf_counter() - start)
    bare_median = statistics.median(bare)
    print(f"{RUNS} runs of 4 steps, {tokens} completion tokens each, {chunks} ids per chunk")
    print(f"agent run: median {median * 1e3:.1f} ms, {median / tokens * 1e6:.1f} us per token")
    print(f"bare parser over the same ids: {bare_median / tokens * 1e6:.1f} us per token")


if __name__ == "__main__":
    main()
