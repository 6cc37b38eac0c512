"""Tokens/s through harmonia against the server directly, for a live llama-server or vLLM.

Three ways to stream the same generation (same prompt ids, same seed, same limit,
the same request body), interleaved run by run so that the shared machine's load
hits them alike:

* ``raw``: the server's own token endpoint read with httpx, ids counted, the body
  built by the engine's own function;
* ``engine``: harmonia's ``LlamaCppEngine`` / ``VLLMEngine``;
* ``serve``: ``harmonia serve`` in front of it, read with the openai SDK (chat,
  streamed, usage from the last chunk): rendering, parsing and SSE included.

    python benchmarks/bench_live_engines.py --engine llama.cpp --start --with-serve
    python benchmarks/bench_live_engines.py --engine vllm --start --with-serve
    python benchmarks/bench_live_engines.py --engine vllm --url http://127.0.0.1:8000 \\
        --model tiny-gpt-oss

``--start`` stands the servers up from the live cache (tools/live, as the tests
in tests/live do). It prints, per path, the median tokens/s, the median of each
run's ratio to ``raw`` and the CPU time per token spent on this side of the
server; docs/engines.md has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import workloads

import harmonia
from harmonia.engines import SamplingParams

REPO = Path(__file__).resolve().parents[1]


def prompt_ids() -> list[int]:
    return workloads.engine_prompt(harmonia, "Tell me a long story about tides.")[1]


async def raw(engine: str, url: str, model: str | None, ids: list[int], n: int, seed: int) -> int:
    """The server's own token stream, asked exactly what the engine asks (same body builder)."""
    import httpx

    from harmonia.engines import llamacpp, vllm

    params = SamplingParams(max_tokens=n, seed=seed)
    if engine == "llama.cpp":
        path, body = "/completion", {**llamacpp.completion_body(ids, params, None), "n_predict": n}
    else:
        path = "/inference/v1/generate"
        body = {
            "token_ids": ids,
            "sampling_params": vllm.sampling_fields(params, None),
            "stream": True,
            **({"model": model} if model else {}),
        }
    count = 0
    async with (
        httpx.AsyncClient(timeout=300, trust_env=False) as client,
        client.stream("POST", url + path, json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            payload = json.loads(line[6:])
            if engine == "llama.cpp":
                count += len(payload.get("tokens") or [])
            else:
                for choice in payload.get("choices") or []:
                    count += len(choice.get("token_ids") or [])
    return count


async def through_engine(
    engine: str, url: str, model: str | None, ids: list[int], n: int, seed: int
) -> int:
    if engine == "llama.cpp":
        from harmonia.engines.llamacpp import LlamaCppEngine

        eng: Any = LlamaCppEngine(url)
        params = SamplingParams(max_tokens=n, seed=seed)
    else:
        from harmonia.engines.vllm import VLLMEngine

        eng = VLLMEngine(url, model=model, api="generate")
        params = SamplingParams(max_tokens=n, seed=seed)
    try:
        count = 0
        async for chunk in eng.generate(ids, params):
            count += len(chunk)
        return count
    finally:
        await eng.aclose()


def through_serve(serve_url: str, model: str, n: int, seed: int) -> int:
    import openai

    client = openai.OpenAI(base_url=serve_url + "/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me a long story about tides."}],
        max_tokens=n,
        seed=seed,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    return usage


def main() -> None:
    if sys.argv[1:2] == ["--serve-child"]:  # harmonia serve, its engine asked for the same work
        _same_work()
        from harmonia._cli.main import main as harmonia_main

        raise SystemExit(harmonia_main(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("llama.cpp", "vllm"), required=True)
    parser.add_argument("--url", help="the server (or --start one from the live cache)")
    parser.add_argument(
        "--start", action="store_true", help="start the server and harmonia serve (tests/live)"
    )
    parser.add_argument("--model", help="vllm: the served model name")
    parser.add_argument(
        "--with-serve", action="store_true", help="also through harmonia serve (needs --start)"
    )
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # A plain kill would leave the started servers running: exit through the clean-up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.serve_url = args.serve_pid = None
    if args.start:
        import contextlib

        sys.path.insert(0, str(REPO / "tests" / "live"))
        import live_support

        server = (
            live_support.start_llama() if args.engine == "llama.cpp" else live_support.start_vllm()
        )
        with contextlib.ExitStack() as stack:
            stack.callback(server.stop)
            args.url, args.model = server.url, live_support.SERVED_NAME
            if args.with_serve:
                serve = _serve_child(live_support, args.engine, server.url)
                stack.callback(serve.stop)
                args.serve_url, args.serve_pid = serve.url, serve.process.pid
            measure(args)
        return
    if not args.url:
        parser.error("--url or --start is required")
    if args.with_serve:
        parser.error("--with-serve needs --start (its harmonia serve must ask for the same work)")
    measure(args)


def _serve_child(live_support: Any, engine: str, url: str) -> Any:
    """``harmonia serve`` in front of ``url``, run through this file so ``_same_work`` holds."""
    port = live_support.free_port()
    command = [
        sys.executable,
        *(str(Path(__file__).resolve()), "--serve-child", "serve"),
        *("--engine", engine, "--url", url, "--host", "127.0.0.1", "--port", str(port)),
        *("--model", live_support.SERVED_NAME),
        *(("--engine-model", live_support.SERVED_NAME) if engine == "vllm" else ()),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    server = live_support.LiveServer("harmonia-serve", command, port, env)
    server.wait_healthy("/health", 300.0)
    return server


def _same_work() -> None:
    """Every path asks the server for the same work: ``--tokens`` ids, never an end id.

    The live tiny model likes harmony's end ids (it ends a turn within tens of
    tokens), which would make every run a few ids long, mostly prompt and
    connection set-up. Banning the end ids (a logit bias; llama.cpp's
    ``ignore_eos`` as well) keeps the sampler's work identical on every path and
    every run ``--tokens`` long; the raw requests are built by the same functions.
    """
    from harmonia.engines import HARMONY_STOP_TOKEN_IDS, llamacpp, vllm

    completion_body, sampling_fields = llamacpp.completion_body, vllm.sampling_fields

    def llama_body(*args: Any) -> dict[str, Any]:
        ban = [[token, False] for token in HARMONY_STOP_TOKEN_IDS]
        return {**completion_body(*args), "ignore_eos": True, "logit_bias": ban}

    def vllm_fields(*args: Any) -> dict[str, Any]:
        ban = {str(token): -100.0 for token in HARMONY_STOP_TOKEN_IDS}
        return {**sampling_fields(*args), "ignore_eos": True, "logit_bias": ban}

    llamacpp.completion_body = llama_body  # type: ignore[assignment]
    vllm.sampling_fields = vllm_fields  # type: ignore[assignment]


def _cpu_seconds(pid: int | None) -> float:
    """CPU seconds used so far by this process, plus ``pid``'s (the harmonia serve child)."""
    used = time.process_time()
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        used += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return used


def measure(args: argparse.Namespace) -> None:
    """Each run streams the same work on every path back to back (the lead rotates).

    Reported: medians of tokens/s, the median of each run's own ratio to ``raw``
    (the paths of one run share the machine's load of that moment), and the CPU
    time per token spent on this side of the server (client, engine, serve),
    which the machine's load barely moves.
    """
    _same_work()
    ids = prompt_ids()
    paths = ["raw", "engine"] + (["serve"] if args.serve_url else [])
    rates: dict[str, list[float]] = {name: [] for name in paths}
    ratios: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    failed = dict.fromkeys(paths, 0)
    for run in range(-1, args.runs):  # run -1 warms each path up (connections, caches): untimed
        seed = 1000 + max(run, 0)
        lead = max(run, 0) % len(paths)
        this_run: dict[str, float] = {}
        for name in paths[lead:] + paths[:lead]:  # each path leads in turn
            pid = args.serve_pid if name == "serve" else None
            cpu_before, started = _cpu_seconds(pid), time.perf_counter()
            try:
                got = one_run(args, name, ids, seed)
            except Exception as exc:  # a run the engine failed loudly (say, ids it lost)
                failed[name] += run >= 0
                print(f"run {run} {name:6} failed: {exc}", flush=True)
                continue
            elapsed = time.perf_counter() - started
            cpu_used = _cpu_seconds(pid) - cpu_before
            if run < 0:
                continue
            rates[name].append(got / elapsed)
            cpu[name].append(cpu_used / got * 1e6)
            this_run[name] = got / elapsed
            print(
                f"run {run} {name:6} {got:4d} tokens {got / elapsed:8.1f} tokens/s "
                f"{cpu_used / got * 1e6:8.0f} us CPU/token here",
                flush=True,
            )
        for name, rate in this_run.items():
            if "raw" in this_run:
                ratios[name].append(rate / this_run["raw"])
    for name in paths:
        if not rates[name]:
            print(f"{name:6} no run succeeded ({failed[name]} failed)")
            continue
        print(
            f"{name:6} median {statistics.median(rates[name]):8.1f} tokens/s"
            f"  run ratio to raw {statistics.median(ratios[name] or [0.0]):.3f}"
            f"  CPU {statistics.median(cpu[name]):6.0f} us/token"
            f"  ({len(rates[name])} runs, {failed[name]} failed)"
        )


def one_run(args: argparse.Namespace, name: str, ids: list[int], seed: int) -> int:
    if name == "raw":
        return asyncio.run(raw(args.engine, args.url, args.model, ids, args.tokens, seed))
    if name == "engine":
        return asyncio.run(
            through_engine(args.engine, args.url, args.model, ids, args.tokens, seed)
        )
    return through_serve(args.serve_url, args.model or "gpt-oss", args.tokens, seed)


if __name__ == "__main__":
    main()
