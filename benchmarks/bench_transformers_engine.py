"""Benchmark the transformers engine's decode loop against ``model.generate``.

Both decode the same randomly initialised gpt-oss (the real 201,088-token
vocabulary, 2 layers, hidden 64, 4 experts, top-2; built from a config, nothing
downloaded) after the same harmony prompt, greedy, for the same number of new
tokens. ``generate`` gets no ``min_new_tokens`` (its logits processor scans
the whole vocabulary each step, which would handicap it); the random model does
not emit its end-of-sequence id, and rates count the tokens really produced.
The engine runs with stop tokens off. Each is timed end to end
(prefill included, as a caller sees it) after one warm-up run; the medians of
``--runs`` runs are printed with their ratio, plus the engine under the
harmony turn mask (``harmonia.constrained``, needs llguidance)::

    python benchmarks/bench_transformers_engine.py                 # 200 tokens, 5 runs
    python benchmarks/bench_transformers_engine.py --threads 1 --device cuda

Needs the ``transformers`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import torch
import workloads

import harmonia
from harmonia.engines import Constraint, SamplingParams
from harmonia.engines.transformers import TransformersEngine, random_gpt_oss


def build_model(device: str) -> Any:
    return random_gpt_oss(seed=0).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200, help="new tokens per run")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-mask", action="store_true", help="skip the masked run")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    question = "Tell me about the weather in Tokyo."
    conversation, prompt = workloads.engine_prompt(harmonia, question)
    model = build_model(args.device)
    engine = TransformersEngine(model)
    n = args.tokens
    inputs = torch.tensor([prompt], device=args.device)

    def run_generate() -> int:
        with torch.inference_mode():
            out = model.generate(
                inputs,
                max_new_tokens=n,
                do_sample=False,
                pad_token_id=199_999,
            )
        return int(out.shape[1] - inputs.shape[1])

    params = SamplingParams(max_tokens=n, temperature=0, stop_token_ids=())

    async def run_engine(constraint: Constraint | None) -> int:
        completion = await engine.generate(prompt, params, constraint=constraint).result()
        return len(completion.tokens)

    async def run_generate_off_loop() -> int:
        return await asyncio.get_running_loop().run_in_executor(None, run_generate)

    async def rates() -> dict[str, float]:
        # Runs alternate, so every contender sees the same machine load (shared
        # machines drift), and each gets one warm-up run first.
        contenders: dict[str, Any] = {
            "model.generate": run_generate_off_loop,
            "TransformersEngine": lambda: run_engine(None),
        }
        if not args.no_mask:
            constraint = Constraint.from_conversation(conversation)
            contenders["TransformersEngine + mask"] = lambda: run_engine(constraint)
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for run in contenders.values():
            await run()  # warm-up (and, for the mask, llguidance's tokenizer and grammar)
        for _ in range(args.runs):
            for name, run in contenders.items():
                started = time.perf_counter()
                produced = await run()
                samples[name].append(produced / (time.perf_counter() - started))
        await engine.aclose()
        return {name: statistics.median(values) for name, values in samples.items()}

    print(
        f"random gpt-oss (vocab 201,088, 2 layers, hidden 64), device {args.device}, "
        f"torch threads {torch.get_num_threads()}, prompt {len(prompt)} tokens, "
        f"{n} new tokens greedy, median of {args.runs} runs"
    )
    medians = asyncio.run(rates())
    reference = medians["model.generate"]
    for name, rate in medians.items():
        ratio = "" if name == "model.generate" else f"   ratio {rate / reference:.2f}"
        print(f"{name:<26} {rate:8.1f} tokens/s{ratio}")


if __name__ == "__main__":
    main()
