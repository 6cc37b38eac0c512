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

Then it times applying a mask to gpt-oss's 201,088 logits (``apply_mask`` on
numpy, ``mask_logits`` on torch CPU tensors when torch is installed), over masks
taken from the sampled turns, next to a plain copy of the logits and to the
boolean-index masking ``apply_mask`` used to do (medians in µs). ``--only-apply``
skips the per-case table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "constrained"))

from constrained_cases import CASES, ENC, Case, TurnSampler

from harmonia._tokenizer import special_tokens as st
from harmonia.constrained import (
    TurnMatcher,
    _mask,
    apply_mask,
    build_turn_grammar,
    mask_logits,
    mask_to_bool,
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


LOGITS = 201_088


def _median_us(run: object, masks: list[np.ndarray], repeat: int = 3) -> float:
    """Median over ``masks`` (each the best of ``repeat`` runs) of ``run(mask)``, in µs."""
    times = []
    for mask in masks:
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter_ns()
            run(mask)  # type: ignore[operator]
            best = min(best, time.perf_counter_ns() - started)
        times.append(best / 1e3)
    return float(np.median(times))


def _boolean_index(logits: np.ndarray, mask: np.ndarray) -> None:
    """How apply_mask masked before: a boolean index (branches per element)."""
    logits[..., ~mask_to_bool(mask, logits.shape[-1])] = -np.inf


def bench_apply(turns: int, seed: int) -> None:
    case = CASES["everything"]
    base = case.matcher()
    sampler = TurnSampler(seed)
    masks = []
    for _ in range(turns):
        matcher = base.copy()
        for token in sampler.sample(base.copy()):
            masks.append(matcher.fill_mask().copy())
            matcher.consume(token)
    masks = masks[:: max(1, len(masks) // 300)]  # about 300, from every kind of position
    rng = np.random.default_rng(seed)
    print(f"\napplying a mask to {LOGITS:,} logits ({len(masks)} masks from sampled turns):")
    print(f"{'logits':<24} {'copy':>8} {'before':>8} {'in place':>9} {'copy=True':>10}   (µs)")
    for dtype in (np.float32, np.float16, np.float64):
        _numpy_row(rng.standard_normal(LOGITS).astype(dtype), masks)
    try:
        import torch
    except ImportError:
        return
    for torch_dtype in (torch.float32, torch.bfloat16, torch.float16):
        _torch_row(torch, torch.from_numpy(rng.standard_normal(LOGITS)).to(torch_dtype), masks)


def _numpy_row(logits: np.ndarray, masks: list[np.ndarray]) -> None:
    work = logits.copy()
    print(
        f"{'numpy ' + logits.dtype.name:<24} "
        f"{_median_us(lambda m: logits.copy(), masks):>8.1f} "
        f"{_median_us(lambda m: _boolean_index(work, m), masks):>8.1f} "
        f"{_median_us(lambda m: apply_mask(work, m), masks):>9.1f} "
        f"{_median_us(lambda m: apply_mask(logits, m, copy=True), masks):>10.1f}"
    )


def _torch_row(torch: Any, tensor: Any, masks: list[np.ndarray]) -> None:
    work = tensor.clone()

    def before(mask: np.ndarray) -> None:
        # How mask_logits masked before: a bool tensor and masked_fill_.
        allowed = torch.from_numpy(mask_to_bool(mask, LOGITS))
        work.masked_fill_(~allowed, float("-inf"))

    print(
        f"{'torch ' + str(tensor.dtype).removeprefix('torch.') + ' (cpu)':<24} "
        f"{_median_us(lambda m: tensor.clone(), masks):>8.1f} "
        f"{_median_us(before, masks):>8.1f} "
        f"{_median_us(lambda m: mask_logits(work, m), masks):>9.1f} "
        f"{_median_us(lambda m: mask_logits(tensor.clone(), m), masks):>10.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="sampled turns per case")
    parser.add_argument("--seed", type=int, default=20250805)
    parser.add_argument("--only-apply", action="store_true", help="only time applying masks")
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
    if not args.only_apply:
        for name in CASES:
            bench_case(CASES[name], args.turns, args.seed)
    bench_apply(min(args.turns, 40), args.seed)


if __name__ == "__main__":
    main()
