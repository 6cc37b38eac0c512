"""Tokens/s through harmonia against the server directly, for a live llama-server or vLLM.

Three ways to stream the same generation (same prompt ids, same seed, same limit),
interleaved run by run so that the shared machine's load hits them alike:

* ``raw``: the server's own token endpoint read with httpx, ids counted;
* ``engine``: harmonia's ``LlamaCppEngine`` / ``VLLMEngine``;
* ``serve``: ``harmonia serve`` in front of it, read with the openai SDK (chat,
  streamed, usage from the last chunk): rendering, parsing and SSE included.

    python benchmarks/bench_live_engines.py --engine llama.cpp --url http://127.0.0.1:8080
    python benchmarks/bench_live_engines.py --engine vllm --start   # from the live cache
    python benchmarks/bench_live_engines.py --engine vllm --url http://127.0.0.1:8000 \\
        --model tiny-gpt-oss [--serve-url http://127.0.0.1:9000]

It prints the median tokens/s of each and the ratios to ``raw``. The tests in
tests/live start the servers this measures; docs/engines.md has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from harmonia import (
    Conversation,
    HarmonyEncodingName,
    Message,
    Role,
    SystemContent,
    load_harmony_encoding,
)
from harmonia.engines import SamplingParams


def prompt_ids() -> list[int]:
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(Role.USER, "Tell me a long story about tides."),
        ]
    )
    return list(enc.render_conversation_for_completion(conv, Role.ASSISTANT))


async def raw(engine: str, url: str, model: str | None, ids: list[int], n: int, seed: int) -> int:
    import httpx

    if engine == "llama.cpp":
        path, body = (
            "/completion",
            {
                "ignore_eos": True,
                "prompt": ids,
                "n_predict": n,
                "seed": seed,
                "stream": True,
                "return_tokens": True,
                "top_k": 0,
                "min_p": 0.0,
                "repeat_penalty": 1.0,
                "cache_prompt": True,
            },
        )
    else:
        sampling = {"max_tokens": n, "seed": seed, "stop_token_ids": [], "ignore_eos": True}
        path, body = (
            "/inference/v1/generate",
            {
                "token_ids": ids,
                "sampling_params": {**sampling, "skip_special_tokens": False},
                "stream": True,
                **({"model": model} if model else {}),
            },
        )
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
        params = SamplingParams(max_tokens=n, seed=seed, stop_token_ids=())
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("llama.cpp", "vllm"), required=True)
    parser.add_argument("--url", help="the server (or --start one from the live cache)")
    parser.add_argument(
        "--start", action="store_true", help="start the server and harmonia serve (tests/live)"
    )
    parser.add_argument("--model", help="vllm: the served model name")
    parser.add_argument("--serve-url", help="a harmonia serve in front of the same server")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument(
        "--with-serve",
        action="store_true",
        help="also through harmonia serve (its turns end at the model's end ids: shorter runs)",
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.start:
        import contextlib
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "live"))
        import live_support

        server = (
            live_support.start_llama() if args.engine == "llama.cpp" else live_support.start_vllm()
        )
        extra = ("--engine-model", live_support.SERVED_NAME) if args.engine == "vllm" else ()
        with contextlib.ExitStack() as stack:
            stack.callback(server.stop)
            serve = stack.enter_context(
                live_support.harmonia_serve(args.engine, server.url, *extra)
            )
            args.url, args.serve_url = server.url, serve
            args.model = live_support.SERVED_NAME
            measure(args)
        return
    if not args.url:
        parser.error("--url or --start is required")
    measure(args)


def _ignore_eos() -> None:
    """Every run writes ``--tokens`` ids: the engines' requests also ask to ignore EOS.

    The live tiny model likes its end ids (it ends turns within tens of tokens), which
    would make every run a few ids long; the raw requests ask the same.
    """
    from harmonia.engines import llamacpp, vllm

    completion_body, sampling_fields = llamacpp.completion_body, vllm.sampling_fields

    def llama_body(*args: Any) -> dict[str, Any]:
        return {**completion_body(*args), "ignore_eos": True}

    def vllm_fields(*args: Any) -> dict[str, Any]:
        return {**sampling_fields(*args), "ignore_eos": True}

    llamacpp.completion_body = llama_body  # type: ignore[assignment]
    vllm.sampling_fields = vllm_fields  # type: ignore[assignment]


def measure(args: argparse.Namespace) -> None:
    _ignore_eos()
    ids = prompt_ids()
    rates: dict[str, list[float]] = {"raw": [], "engine": [], "serve": []}
    for run in range(args.runs):
        seed = 1000 + run
        order = ("raw", "engine", "serve") if run % 2 == 0 else ("engine", "raw", "serve")
        for name in order:  # alternated: the first of a run also pays the prompt's prefill
            if name == "serve" and not (args.serve_url and args.with_serve):
                continue
            started = time.perf_counter()
            if name == "raw":
                got = asyncio.run(raw(args.engine, args.url, args.model, ids, args.tokens, seed))
            elif name == "engine":
                coro = through_engine(args.engine, args.url, args.model, ids, args.tokens, seed)
                got = asyncio.run(coro)
            else:
                got = through_serve(args.serve_url, args.model or "gpt-oss", args.tokens, seed)
            elapsed = time.perf_counter() - started
            rates[name].append(got / elapsed)
            print(f"run {run} {name:6} {got:4d} tokens {got / elapsed:8.1f} tokens/s", flush=True)
    base = statistics.median(rates["raw"])
    for name, values in rates.items():
        if values:
            median = statistics.median(values)
            print(f"{name:6} median {median:8.1f} tokens/s  ratio {median / base:.3f}")


if __name__ == "__main__":
    main()
