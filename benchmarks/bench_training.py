"""Benchmark the training-data pipeline side by side with openai-harmony.

Run it with the ``parquet`` and ``bench`` extras installed::

    python benchmarks/bench_training.py                  # ~1 minute
    python benchmarks/bench_training.py --conversations 300 --build-rows 2000  # quick

On one seeded generated corpus (1-8 turns, reasoning in 80 % of assistant turns,
tool calls in a third of the conversations, text from ``workloads.TextGen``) it
prints medians of:

* render, one core: openai-harmony's ``render_conversation_for_training``,
  harmonia's plain ``render_conversation_for_training``, and harmonia's
  ``render_for_training`` with masks (the default ``harmony`` policy, and the
  reference's drop rule with all turns, which renders the same ids as the plain
  call, so the difference is the cost of the masks);
* ``harmonia data build`` of ``--build-rows`` conversations with 1 and 2 workers
  (wall time, rows/s), the peak RSS of the workers for a quarter and all of the
  rows at a fixed shard size (flat means memory does not grow with the dataset),
  and bytes per token on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads

SEED = 20261123


def spec(rng: random.Random, gen: workloads.TextGen) -> dict[str, Any]:
    """A library-neutral conversation: turns of (user, reasoning, call?, answer)."""
    tools = rng.random() < 1 / 3
    turns = []
    for _ in range(rng.randint(1, 8)):
        turn: dict[str, Any] = {"user": gen.sentence(6, 20)}
        if rng.random() < 0.8:
            turn["reasoning"] = gen.paragraph(rng.randint(2, 6))
        if tools and rng.random() < 0.5:
            turn["call"] = json.dumps({"city": gen.words(2), "days": rng.randint(1, 9)})
            turn["result"] = json.dumps({"forecast": gen.sentence(), "temp": rng.randint(-9, 30)})
            if rng.random() < 0.6:
                turn["after"] = gen.paragraph(rng.randint(1, 3))
        turn["answer"] = gen.paragraph(rng.randint(1, 5))
        turns.append(turn)
    return {"tools": tools, "turns": turns}


TOOL = {
    "name": "get_forecast",
    "description": "Gets the weather forecast.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "number"}},
        "required": ["city"],
    },
}


def to_harmony(h: ModuleType, s: dict[str, Any]) -> Any:
    """The conversation as ``h``'s objects (``h`` is harmonia or openai_harmony)."""
    m = h.Message.from_role_and_content
    system = h.SystemContent.new().with_conversation_start_date("2026-01-01")
    messages = [m(h.Role.SYSTEM, system)]
    developer = h.DeveloperContent.new().with_instructions("Answer carefully.")
    if s["tools"]:
        developer = developer.with_function_tools(
            [
                h.ToolDescription.new(
                    TOOL["name"], TOOL["description"], parameters=TOOL["parameters"]
                )
            ]
        )
    messages.append(m(h.Role.DEVELOPER, developer))
    for turn in s["turns"]:
        messages.append(m(h.Role.USER, turn["user"]))
        if "reasoning" in turn:
            messages.append(m(h.Role.ASSISTANT, turn["reasoning"]).with_channel("analysis"))
        if "call" in turn:
            messages.append(
                m(h.Role.ASSISTANT, turn["call"])
                .with_channel("commentary")
                .with_recipient("functions.get_forecast")
                .with_content_type("<|constrain|>json")
            )
            tool = h.Author.new(h.Role.TOOL, "functions.get_forecast")
            messages.append(
                h.Message.from_author_and_content(tool, turn["result"])
                .with_channel("commentary")
                .with_recipient("assistant")
            )
            if "after" in turn:
                messages.append(m(h.Role.ASSISTANT, turn["after"]).with_channel("analysis"))
        messages.append(m(h.Role.ASSISTANT, turn["answer"]).with_channel("final"))
    return h.Conversation.from_messages(messages)


def to_chat(s: dict[str, Any]) -> dict[str, Any]:
    """The same conversation as an OpenAI chat row (what ``harmonia data build`` reads)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Answer carefully."}]
    for k, turn in enumerate(s["turns"]):
        messages.append({"role": "user", "content": turn["user"]})
        if "call" in turn:
            call = {"id": f"c{k}", "type": "function"}
            call["function"] = {"name": "get_forecast", "arguments": turn["call"]}  # type: ignore[assignment]
            messages.append(
                {
                    "role": "assistant",
                    "reasoning_content": turn.get("reasoning"),
                    "tool_calls": [call],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": turn["result"]})
            messages.append(
                {
                    "role": "assistant",
                    "reasoning_content": turn.get("after"),
                    "content": turn["answer"],
                }
            )
        else:
            messages.append(
                {
                    "role": "assistant",
                    "reasoning_content": turn.get("reasoning"),
                    "content": turn["answer"],
                }
            )
    row: dict[str, Any] = {"messages": messages}
    if s["tools"]:
        row["tools"] = [{"type": "function", "function": TOOL}]
    return row


def corpus(n: int) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    gen = workloads.TextGen(SEED)
    return [spec(rng, gen) for _ in range(n)]


def bench_render(specs: list[dict[str, Any]], repeat: int) -> None:
    import harmonia
    from harmonia.training import TrainPolicy, render_for_training

    enc = harmonia.load_harmony_encoding("HarmonyGptOss", engine="quicktok")
    ours = [to_harmony(harmonia, s) for s in specs]
    rows: list[tuple[str, Callable[[], int]]] = []
    try:
        import openai_harmony as oh

        # The reference reads the vocabulary from TIKTOKEN_ENCODINGS_BASE (no network).
        vocab = tempfile.mkdtemp()
        harmonia.write_tiktoken_file(vocab)
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = vocab
        ref = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
        theirs = [to_harmony(oh, s) for s in specs]
        assert [ref.render_conversation_for_training(c) for c in theirs[:50]] == [
            enc.render_conversation_for_training(c) for c in ours[:50]
        ], "harmonia and openai-harmony disagree on the corpus"
        rows.append(
            (
                "openai-harmony render_conversation_for_training",
                lambda: sum(len(ref.render_conversation_for_training(c)) for c in theirs),
            )
        )
    except ImportError:
        print("openai-harmony is not installed: the reference column is missing")
    reference_all = TrainPolicy(cot="reference", turns="all")
    rows += [
        (
            "harmonia render_conversation_for_training (plain)",
            lambda: sum(len(enc.render_conversation_for_training(c)) for c in ours),
        ),
        (
            "harmonia render_for_training, masks (reference rule, all turns)",
            lambda: sum(
                len(s.input_ids) for c in ours for s in render_for_training(c, enc, reference_all)
            ),
        ),
        (
            "harmonia render_for_training, masks (harmony policy)",
            lambda: sum(len(s.input_ids) for c in ours for s in render_for_training(c, enc)),
        ),
    ]
    for _, fn in rows:
        fn()  # warm: the quicktok build, imports
    clear = enc._renderer.clear_caches  # a data build renders every text once: time it cold

    def cold(fn: Callable[[], int]) -> Callable[[], int]:
        def run() -> int:
            clear()
            return fn()

        return run

    # The rows take turns in every repetition, so a noisy neighbour slows all of
    # them alike, and the ratio below is the median of the per-repetition ratios.
    # The order reverses every repetition (as in bench.py): no row always runs
    # right after the reference's large allocations.
    times: dict[str, list[float]] = {label: [] for label, _ in rows}
    tokens: dict[str, int] = {}
    for k in range(repeat):
        for label, fn in rows if k % 2 == 0 else rows[::-1]:
            run = fn if label.startswith("openai") else cold(fn)
            start = time.perf_counter()
            tokens[label] = run()
            times[label].append(time.perf_counter() - start)
    results = {
        label: (statistics.median(t), tokens[label] / statistics.median(t))
        for label, t in times.items()
    }
    print(f"\nrender, one core, {len(specs)} conversations, caches cleared (median of {repeat}):")
    for label, (seconds, rate) in results.items():
        print(f"  {label:<66} {seconds * 1e3:8.1f} ms  {rate / 1e6:6.2f} M tok/s")
    labels = list(results)
    if labels[0].startswith("openai-harmony"):
        base = results[labels[0]][1]
        for label in labels[1:]:
            print(f"  {label:<66} {results[label][1] / base:6.1f}x the reference")
    # Time over the plain render of the same conversations, median of the paired
    # runs. The reference rule renders the plain call's ids, so its difference is the
    # cost of spans and masks alone; the harmony policy drops more reasoning, so it
    # renders fewer ids (compare its time, not its tokens/s).
    plain = times["harmonia render_conversation_for_training (plain)"]
    for label, what in (
        ("harmonia render_for_training, masks (reference rule, all turns)", "same ids"),
        ("harmonia render_for_training, masks (harmony policy)", "fewer ids"),
    ):
        paired = statistics.median(m / p - 1 for m, p in zip(times[label], plain, strict=True))
        name = label.split("masks ")[1]
        print(f"  masks {name} over the plain render ({what}, paired median): {paired:+.1%}")


def bench_build(rows: int, shard_rows: int) -> None:
    from harmonia.training import BuildOptions, build

    chat = [json.dumps(to_chat(s)) for s in corpus(rows)]  # every row distinct
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        full = base / "full.jsonl"
        full.write_text("\n".join(chat) + "\n")
        size = full.stat().st_size / 1e6
        print(f"\nharmonia data build, {rows} conversations ({size:.1f} MB JSONL):")
        for workers in (1, 2):
            out = base / f"out{workers}"
            start = time.perf_counter()
            manifest = build(
                [full],
                out,
                options=BuildOptions(workers=workers, shard_rows=shard_rows, progress="none"),
            )
            seconds = time.perf_counter() - start
            tokens = manifest["stats"]["tokens"]
            print(
                f"  --workers {workers}: {seconds:6.2f} s  {rows / seconds:8.0f} rows/s  "
                f"{tokens / seconds / 1e6:5.2f} M tok/s"
            )
        on_disk = sum(p.stat().st_size for p in (base / "out2").glob("part-*.parquet"))
        print(f"  on disk: {on_disk / tokens:.2f} bytes/token ({tokens} tokens, zstd)")
    _worker_memory(chat, shard_rows)


def _worker_memory(chat: list[str], shard_rows: int) -> None:
    """Peak RSS of a worker for a quarter and all of the rows at one shard size,
    each build in a fresh process.

    The workers are the build's children: ``RUSAGE_CHILDREN`` gives the peak of the
    largest of them once they are joined (workers render chunks of at most 512
    lines, so even a single shard runs in them).
    """
    import subprocess

    shard = shard_rows
    script = (
        "import resource,sys,tempfile\n"
        "from harmonia.training import BuildOptions, build\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    options = BuildOptions(workers=2, shard_rows=int(sys.argv[2]), progress='none')\n"
        "    build([sys.argv[1]], d, options=options)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    peaks = []
    with tempfile.TemporaryDirectory() as tmp:
        for count in (len(chat) // 4, len(chat)):
            path = Path(tmp) / f"{count}.jsonl"
            path.write_text("\n".join(chat[:count]) + "\n")
            done = subprocess.run(
                [sys.executable, "-c", script, str(path), str(shard)],
                capture_output=True,
                text=True,
                check=True,
            )
            peaks.append((count, int(done.stdout.split()[-1]) / 1024))
    for count, mib in peaks:
        shards = -(-count // shard)
        print(
            f"  peak RSS of a worker, {count:6d} rows ({shards} shards of {shard}): {mib:6.0f} MiB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=1000, help="for the render bench")
    parser.add_argument("--build-rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shard-rows", type=int, default=10_000, help="the build's default")
    args = parser.parse_args()
    specs = corpus(args.conversations)
    print(f"python {sys.version.split()[0]}, corpus seed {SEED}")
    bench_render(specs, args.repeat)
    if args.build_rows:  # --build-rows 0 times the render only
        bench_build(args.build_rows, args.shard_rows)
    print(f"\nparent peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
