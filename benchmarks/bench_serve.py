"""Load benchmark of ``harmonia serve`` with the scripted engine (a script, not a test).

The server runs in its own process (uvicorn, httptools, uvloop) on 127.0.0.1;
this process is the load client: raw asyncio HTTP/1.1 connections that read
the chunked SSE stream themselves (no client library in the measurement).
Three runs:

* ``unpaced``: streams with an engine that never waits; SSE chunks per second;
* ``paced``: 200 streams at 50 tokens/s each (20 ms per token); inter-token
  latency at the client, the server's share (latency minus the 20 ms pace) at
  p50/p99, time to first token over the pace, server RSS;
* ``disconnects``: 50 paced streams closed after a few tokens; how long each
  engine generation took to stop after its client left.

    python benchmarks/bench_serve.py            # all three, 5 runs each, ~1 minute
    python benchmarks/bench_serve.py --quick    # smaller

Client and server share this machine's cores, so the numbers are pessimistic.
``BENCH_SERVER_COMMAND="python wrapper.py"`` runs the server through a wrapper
(given port, delay and words as arguments; e.g. one that profiles
``bench_serve.serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
MODEL = "bench"
PACE = 0.02


# -- the server process ---------------------------------------------------------------------


def serve(port: int, delay: float, words: int) -> None:
    """Run the server with a scripted engine; record when each generation ends."""
    import uvicorn

    import harmonia
    from harmonia.engines import Script, ScriptedEngine
    from harmonia.serve import ServerConfig, create_app

    enc = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
    text = "<|channel|>final<|message|>" + "word " * words + "<|return|>"
    script = Script(tuple(enc.encode(text, allowed_special="all")), delay=delay)
    ends: list[dict[str, Any]] = []
    watchers: set[asyncio.Future[None]] = set()  # strong references until each ends

    class Engine(ScriptedEngine):
        def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Any:
            generation = super().generate(prompt, params, constraint=constraint)

            async def watch() -> None:
                finish = await generation.wait()
                ends.append(
                    {"t": time.time(), "reason": finish.reason.value, "n": len(generation.tokens)}
                )

            task = asyncio.ensure_future(watch())
            watchers.add(task)
            task.add_done_callback(watchers.discard)
            return generation

    engine = Engine(lambda prompt: script)
    config = ServerConfig(
        model=MODEL, store="none", max_concurrent=1000, queue_size=1000, port=port
    )
    app = create_app(engine, config)

    @app.get("/bench/ends")
    async def bench_ends() -> Any:
        return ends

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- the client ------------------------------------------------------------------------------


def request_bytes(port: int, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say many words."}],
            "stream": True,
            "max_tokens": max_tokens,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def stream(
    port: int, payload: bytes, close_after: int | None = None
) -> tuple[float, list[float], int, float]:
    """One SSE stream: (start, arrival time of each data chunk, chunks, close time)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.perf_counter()
    writer.write(payload)
    arrivals: list[float] = []
    count = 0
    closed = 0.0
    try:
        while await reader.readline() not in (b"\r\n", b""):
            pass  # the response headers
        while True:
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                break
            data = await reader.readexactly(size + 2)
            events = data.count(b"data: {")
            if events:
                arrivals.append(time.perf_counter())
                count += events
            if close_after is not None and count >= close_after:
                closed = time.time()
                break
    finally:
        writer.close()
    return start, arrivals, count, closed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ServerProcess:
    def __init__(self, delay: float, words: int) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        code = f"import bench_serve; bench_serve.serve({self.port}, {delay}, {words})"
        command = [sys.executable, "-c", code]
        if os.environ.get("BENCH_SERVER_COMMAND"):  # e.g. a profiling wrapper
            command = [*os.environ["BENCH_SERVER_COMMAND"].split(), str(self.port), str(delay),
                       str(words)]  # fmt: skip
        self.process = subprocess.Popen(command, env=env, cwd=Path(__file__).parent)
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health") as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def get(self, path: str) -> Any:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}") as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """The median, then every repetition: 'median (a, b, c)'."""
    return fmt.format(statistics.median(values)) + " (" + ", ".join(map(fmt.format, values)) + ")"


async def unpaced(streams: int, words: int, repeat: int) -> None:
    server = ServerProcess(0.0, words)
    try:
        payload = request_bytes(server.port, words + 10)
        await asyncio.gather(*(stream(server.port, payload) for _ in range(4)))  # warm
        rates = []
        for _ in range(repeat):
            started = time.perf_counter()
            results = await asyncio.gather(*(stream(server.port, payload) for _ in range(streams)))
            rates.append(sum(r[2] for r in results) / (time.perf_counter() - started))
        print(
            f"unpaced: {streams} streams x {words} tokens, {repeat} runs: SSE chunks/s median "
            f"{spread(rates, '{:,.0f}')}; server RSS {rss_mb(server.process.pid):.0f} MB"
        )
    finally:
        server.stop()


async def paced(streams: int, words: int, repeat: int) -> None:
    server = ServerProcess(PACE, words)
    try:
        payload = request_bytes(server.port, words + 10)
        rss_before = rss_mb(server.process.pid)
        runs: dict[str, list[float]] = {"p50": [], "p99": [], "ttft50": [], "ttft99": []}
        for _ in range(repeat):
            results = await asyncio.gather(*(stream(server.port, payload) for _ in range(streams)))
            gaps = [b - a for _, t, _, _ in results for a, b in itertools.pairwise(t)]
            ttft = [t[0] - start for start, t, _, _ in results if t]
            runs["p50"].append(percentile(gaps, 0.5) * 1000)
            runs["p99"].append(percentile(gaps, 0.99) * 1000)
            runs["ttft50"].append(percentile(ttft, 0.5) * 1000)
            runs["ttft99"].append(percentile(ttft, 0.99) * 1000)
        added = {key: [v - PACE * 1000 for v in runs[key]] for key in ("p50", "p99")}
        print(
            f"paced: {streams} streams at {1 / PACE:.0f} tokens/s, {words} tokens each, "
            f"{repeat} runs (medians, then each run), in ms: ITL p50 {spread(runs['p50'])}, "
            f"p99 {spread(runs['p99'])}; server-added (minus the {PACE * 1000:.0f} ms pace) "
            f"p50 {spread(added['p50'])}, p99 {spread(added['p99'])}; TTFT p50 "
            f"{spread(runs['ttft50'], '{:.0f}')}, p99 {spread(runs['ttft99'], '{:.0f}')}; "
            f"server RSS {rss_before:.0f} -> {rss_mb(server.process.pid):.0f} MB"
        )
    finally:
        server.stop()


async def disconnects(count: int) -> None:
    server = ServerProcess(PACE, 400)
    try:
        payload = request_bytes(server.port, 500)
        before = len(server.get("/bench/ends"))
        results = await asyncio.gather(
            *(stream(server.port, payload, close_after=5 + i % 10) for i in range(count))
        )
        await asyncio.sleep(0.5)
        ends = server.get("/bench/ends")[before:]
        cancelled = sorted(e["t"] for e in ends if e["reason"] == "cancelled")
        closes = sorted(r[3] for r in results)
        # Pair the i-th close with the i-th cancellation (both sorted in time).
        lags = [(end - close) * 1000 for close, end in zip(closes, cancelled, strict=False)]
        within = sum(lag <= PACE * 1000 for lag in lags)
        print(
            f"disconnects: {count} streams closed, {len(cancelled)} engine generations "
            f"cancelled; stop lag after close p50 {statistics.median(lags):.1f} ms, max "
            f"{max(lags):.1f} ms; {within}/{count} within one token ({PACE * 1000:.0f} ms)"
        )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="unpaced,paced,disconnects")
    parser.add_argument("--repeat", type=int, default=5, help="runs of unpaced and paced")
    args = parser.parse_args()
    only = set(args.only.split(","))
    scale = 4 if args.quick else 1
    if "unpaced" in only:
        asyncio.run(unpaced(64 // scale, 500, args.repeat))
    if "paced" in only:
        asyncio.run(paced(200 // scale, 100, args.repeat))
    if "disconnects" in only:
        asyncio.run(disconnects(50))


if __name__ == "__main__":
    main()
