"""Benchmark constrained decoding: grammar compile time and per-token mask time.

Run it with the ``constrained`` and ``dev`` extras installed::

    python benchmarks/bench_constrained.py              # 200 sampled turns per case
    python benchmarks/bench_constrained.py --turns 50   # quicker, rougher

The cases are the conversations of the property test
(``tests/constrained/constrained_cases.py``): function tools with nested schemas,
enums and arrays; the browser and python tools; a response format with tools;
everything together. For each case it prints

* the time to build the grammar text from the conversation (pure Python),
* the time to compile it with llguidance (the process-wide template cache is
  cleared before each compile, so this is the cost of a new tool set),
* the time of ``TurnMatcher.fill_mask`` per generated token, mean and p99,
  overall and split by where the token is: in a header, in free text (analysis,
  preambles, python code, plain answers) or in JSON (tool arguments, structured
  answers); and the time of ``consume`` per token.

Tokens come from sampling turns under the mask with the property test's random
logits, so every position a model can reach is measured, headers included. The
one-off cost of building llguidance's tokenizer for the 201,089-token
vocabulary is printed first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "constrained"))

from constrained_cases import CASES, ENC, Case, TurnSampler

from harmonia._tokenizer import special_tokens as st
from harmonia.constrained import (
    TurnMatcher,
    _mask,
    build_turn_grammar,
)


def _where(case: Case, tokens: list[int]) -> str:
    """Where the next token goes: "header", "text" or "json"."""
    starts = [i for i, t in enumerate(tokens) if t in (st.START, st.END, st.CALL, st.RETURN)]
    begin = starts[-1] + 1 if starts else 0
    if st.MESSAGE not in tokens[begin:]:
        return "header"
    header = ENC.decode(tokens[begin : tokens.index(st.MESSAGE, begin)])
    if " to=" in header:
        recipient = header.split(" to=")[1].split("<")[0].split()[0]
        return "text" if case.tools.get(recipient) is None else "json"
    if "final" in header and case.response_formats:
        return "json"
    return "text"


def _stats(samples: list[float]) -> str:
    if not samples:
        return f"{'-':>15}"
    arr = np.array(samples)
    return f"{arr.mean():6.1f} /{np.percentile(arr, 99):7.1f}"


def bench_case(case: Case, turns: int, seed: int) -> None:
    started = time.perf_counter()
    for _ in range(20):
        grammar = build_turn_grammar(case.conversation, case.options)
    build_ms = (time.perf_counter() - started) / 20 * 1e3
    compile_ms = []
    for _ in range(10):
        _mask._templates.clear()
        started = time.perf_counter()
        TurnMatcher.from_conversation(case.conversation, case.options)
        compile_ms.append((time.perf_counter() - started) * 1e3)
    base = case.matcher()
    sampler = TurnSampler(seed)
    masks: dict[str, list[float]] = {"header": [], "text": [], "json": []}
    consumes: list[float] = []
    buffer = np.zeros(_mask.MASK_WORDS, dtype=np.int32)
    for _ in range(turns):
        matcher = base.copy()
        for token in sampler.sample(base.copy()):
            where = _where(case, list(matcher.tokens))
            started = time.perf_counter_ns()
            matcher.fill_mask(buffer)
            masks[where].append((time.perf_counter_ns() - started) / 1e3)
            started = time.perf_counter_ns()
            matcher.consume(token)
            consumes.append((time.perf_counter_ns() - started) / 1e3)
    every = [x for samples in masks.values() for x in samples]
    print(
        f"{case.name:<16} {len(grammar):>7} {build_ms:>8.2f} {np.median(compile_ms):>8.2f} "
        f"{len(every):>7}  {_stats(every)}  {_stats(masks['header'])}  {_stats(masks['text'])}  "
        f"{_stats(masks['json'])}  {_stats(consumes)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="sampled turns per case")
    parser.add_argument("--seed", type=int, default=20250805)
    args = parser.parse_args()
    started = time.perf_counter()
    _mask.llg_tokenizer()
    print(f"llguidance tokenizer for o200k_harmony: {time.perf_counter() - started:.2f} s (once)")
    print(
        "times: grammar build and compile in ms (median of 10 compiles, cache cleared); "
        "per-token times in µs as mean / p99"
    )
    print(
        f"{'case':<16} {'grammar':>7} {'build':>8} {'compile':>8} {'tokens':>7}  "
        f"{'mask (all)':>15}  {'mask (header)':>15}  {'mask (text)':>15}  {'mask (json)':>15}  "
        f"{'consume':>15}"
    )
    for name in CASES:
        bench_case(CASES[name], args.turns, args.seed)


if __name__ == "__main__":
    main()
