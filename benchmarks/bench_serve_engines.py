"""``harmonia serve`` in front of a fake engine server: CPU per token, throughput, latency.

A sibling of ``bench_serve.py`` (which drives the in-process scripted engine):
here ``harmonia serve`` is the real command (``--engine vllm`` or
``--engine llama.cpp``) in front of ``tests/serve/fake_engine.py``, which
streams one id per SSE event on each wire format (vLLM's generate endpoint,
vLLM's ``/v1/completions``, llama-server's ``/completion``), paced at one
token per ``--pace`` seconds per stream. The load client is raw asyncio
HTTP/1.1 (no client library in the measurement): N streamed requests at once,
Chat Completions or Responses (``--api chat,responses``). Reported per run:

* server CPU per streamed token: the user+system CPU time of the harmonia
  process (all its workers) during the run, over the SSE events streamed (a
  Chat stream of N tokens has N + 2 events, a Responses stream N + 8: its
  deltas and the item and response events around them);
* delivered / offered tokens per second (offered: N / pace);
* time to first token p50/p99 and inter-token latency p50/p99 at the client.

    python benchmarks/bench_serve_engines.py                       # a small matrix
    python benchmarks/bench_serve_engines.py --formats generate --streams 64,256 \\
        --workers 1,2 --repeat 3

Everything (client, fake engine, server) shares this machine's cores.
``BENCH_PROFILE=out.prof`` runs the server under cProfile (one worker);
``BENCH_SRC=/path/to/other/src`` measures another checkout's server.
``--target-port PORT --target-pid PID`` streams to a server already running
(vLLM's own OpenAI server, or harmonia in front of it) and counts the CPU of
that process: docs/serve.md has the side-by-side commands.
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
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
FAKE = ROOT / "tests" / "serve" / "fake_engine.py"
MODEL = "bench"
TICKS = os.sysconf("SC_CLK_TCK")

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import percentile, stream  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's workers are children of the main process)."""
    out = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in children:
        out += tree(int(child))
    return out


def cpu_seconds(pid: int, children: bool = True) -> float:
    total = 0
    for each in tree(pid) if children else [pid]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def wait_health(url: str, process: subprocess.Popen[Any], workers: int) -> None:
    """Until every worker answers ``/health`` 200 (each names itself in a header)."""
    deadline = time.monotonic() + 90
    ready: set[str] = set()
    while len(ready) < workers:
        if process.poll() is not None:
            raise RuntimeError(f"the process exited ({process.returncode})")
        try:
            with urllib.request.urlopen(url + "/health") as answer:
                if answer.status == 200:
                    ready.add(answer.headers.get("x-harmonia-worker", "0"))
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Stack:
    """The fake engine and ``harmonia serve`` in front of it."""

    def __init__(
        self,
        wire: str,
        words: int,
        pace: float,
        workers: int,
        profile: str | None = os.environ.get("BENCH_PROFILE"),
    ) -> None:
        self.engine_port, self.port = free_port(), free_port()
        # BENCH_SRC: another checkout's src (the code before a change), same fake engine.
        env = {**os.environ, "PYTHONPATH": os.environ.get("BENCH_SRC", str(SRC))}
        fake = [sys.executable, str(FAKE), str(self.engine_port), "--words", str(words),
                "--pace", str(pace)]  # fmt: skip
        if wire == "completions":
            fake.append("--no-generate")
        self.fake = subprocess.Popen(fake, stdout=subprocess.PIPE, text=True, env=env)
        assert self.fake.stdout is not None and self.fake.stdout.readline().strip() == "ready"
        engine = "llama.cpp" if wire == "llama.cpp" else "vllm"
        command = [sys.executable, "-m", "harmonia.serve._cli"]
        if profile:
            command = [sys.executable, "-m", "cProfile", "-o", profile,
                       "-m", "harmonia.serve._cli"]  # fmt: skip
        command += ["--engine", engine, "--url", f"http://127.0.0.1:{self.engine_port}",
                    "--port", str(self.port), "--model", MODEL, "--store", "none",
                    "--max-concurrent", "4096", "--queue-size", "4096",
                    "--log-level", "warning"]  # fmt: skip
        if workers > 1:
            command += ["--workers", str(workers)]
        self.server = subprocess.Popen(command, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_health(self.url, self.server, workers)

    def stop(self) -> None:
        import signal

        self.server.send_signal(signal.SIGINT)
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
        self.fake.kill()
        self.fake.wait()


def request_bytes(
    port: int,
    max_tokens: int,
    model: str = MODEL,
    extra: dict[str, Any] | None = None,
    api: str = "chat",
) -> bytes:
    """One streamed request: Chat Completions (``api="chat"``) or Responses."""
    if api == "responses":
        path = "/v1/responses"
        fields: dict[str, Any] = {"input": "Say many words.", "max_output_tokens": max_tokens}
    else:
        path = "/v1/chat/completions"
        fields = {
            "messages": [{"role": "user", "content": "Say many words."}],
            "max_tokens": max_tokens,
        }
    body = json.dumps({"model": model, **fields, "stream": True, **(extra or {})}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def one_run(
    stack: Stack, streams: int, words: int, pace: float, api: str
) -> dict[str, float]:
    payload = request_bytes(stack.port, words + 20, api=api)
    before = cpu_seconds(stack.server.pid)
    started = time.perf_counter()
    results = await asyncio.gather(*(stream(stack.port, payload) for _ in range(streams)))
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(stack.server.pid) - before
    tokens = sum(count for _, _, count, _ in results)
    gaps = [b - a for _, t, _, _ in results for a, b in itertools.pairwise(t)]
    ttft = [t[0] - start for start, t, _, _ in results if t]
    return {
        "tokens": tokens,
        "us_per_token": cpu / max(tokens, 1) * 1e6,
        "delivered": tokens / elapsed,
        "offered": streams / pace if pace > 0 else float("nan"),
        "ttft50": percentile(ttft, 0.5) * 1000,
        "ttft99": percentile(ttft, 0.99) * 1000,
        "itl50": percentile(gaps, 0.5) * 1000 if gaps else float("nan"),
        "itl99": percentile(gaps, 0.99) * 1000 if gaps else float("nan"),
    }


def bench(
    wire: str, api: str, streams: int, workers: int, words: int, pace: float, repeat: int
) -> None:
    stack = Stack(wire, words, pace, workers)
    try:
        asyncio.run(_warm(stack, words, api))
        runs = [asyncio.run(one_run(stack, streams, words, pace, api)) for _ in range(repeat)]
    finally:
        stack.stop()
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    each = ", ".join(f"{run['us_per_token']:.0f}" for run in runs)
    print(
        f"| {wire} | {api} | {streams} | {workers} | {median['us_per_token']:.0f} "
        f"({each}) | "
        f"{median['delivered']:,.0f} / {median['offered']:,.0f} | "
        f"{median['ttft50']:.0f} / {median['ttft99']:.0f} | "
        f"{median['itl50']:.1f} / {median['itl99']:.1f} |",
        flush=True,
    )


def calls_per_token(wire: str, api: str, streams: int) -> None:
    """Python calls per streamed event (a count, not a time: the same on any machine).

    The server runs under cProfile twice, streams of 100 and of 300 words, each
    started afresh and not warmed: start-up and first-request work is the same
    in both, so the difference in calls over the difference in SSE events is
    what one more streamed token costs.
    """
    import pstats
    import tempfile

    counted = []
    for words in (100, 300):
        with tempfile.TemporaryDirectory() as tmp:
            stack = Stack(wire, words, 0.02, 1, profile=f"{tmp}/server.prof")
            try:
                run = asyncio.run(one_run(stack, streams, words, 0.02, api))
            finally:
                stack.stop()
            stats = pstats.Stats(f"{tmp}/server.prof").stats  # type: ignore[attr-defined]
            counted.append((sum(entry[1] for entry in stats.values()), run["tokens"]))
    (calls_a, tokens_a), (calls_b, tokens_b) = counted
    print(f"| {wire} | {api} | {streams} | {(calls_b - calls_a) / (tokens_b - tokens_a):.1f} |")


async def _warm(stack: Stack, words: int, api: str) -> None:
    payload = request_bytes(stack.port, words + 20, api=api)
    await asyncio.gather(*(stream(stack.port, payload) for _ in range(4)))


async def stream_usage(port: int, payload: bytes) -> tuple[int, int]:
    """One SSE stream: its data chunks and the ``completion_tokens`` of its usage chunk."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    chunks, tokens, body = 0, 0, b""
    try:
        while await reader.readline() not in (b"\r\n", b""):
            pass  # the response headers
        while size := int((await reader.readline()).strip() or b"0", 16):
            body += (await reader.readexactly(size + 2))[:-2]
            *events, body = body.split(b"\n\n")
            for event in events:
                if not event.startswith(b"data: {"):
                    continue
                chunks += 1
                if b'"usage"' in event:
                    usage = json.loads(event[6:]).get("usage") or {}
                    tokens = usage.get("completion_tokens") or tokens
    finally:
        writer.close()
    return chunks, tokens


async def against(port: int, pid: int, streams: int, tokens: int, args: Any) -> None:
    """Streams to a server already running (``--target-port``), the CPU of process ``pid``.

    For the side-by-side with vLLM's own front end: run it once against vLLM's
    OpenAI server (``pid``: its API server process, ``--target-alone`` so that its
    EngineCore child is left out) and once against ``harmonia serve`` in front of
    it (``pid``: harmonia's, its workers included). Per token is per sampled id
    (the usage of each stream), since the two front ends chunk the ids differently.
    """
    extra = json.loads(args.extra_body) if args.extra_body else None
    usage = {"stream_options": {"include_usage": True}}
    payload = request_bytes(port, tokens, args.model, {**usage, **(extra or {})})
    await asyncio.gather(*(stream_usage(port, payload) for _ in range(min(streams, 2))))  # warm
    children = not args.target_alone
    before = cpu_seconds(pid, children)
    started = time.perf_counter()
    results = await asyncio.gather(*(stream_usage(port, payload) for _ in range(streams)))
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(pid, children) - before
    chunks = sum(count for count, _ in results)
    sampled = sum(count for _, count in results)
    print(
        f"{streams} streams: {sampled} tokens ({chunks} chunks) in {elapsed:.1f} s; "
        f"process {pid}{'' if children else ' alone'}: {cpu:.2f} s CPU, "
        f"{cpu / max(sampled, 1) * 1e6:.0f} us per token"
    )


def rss_mb(pid: int) -> float:
    total = 0
    for each in tree(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


async def soak(total: int, concurrency: int, workers: int) -> None:
    """``total`` short streamed requests, ``concurrency`` at once: RSS after each tenth.

    Each tenth is printed as it is reached (with the time so far), so a soak
    stopped early still shows its trend; the last line compares the end with
    the first tenth.
    """
    stack = Stack("generate", 5, 0.0, workers)
    started = time.perf_counter()
    try:
        payload = request_bytes(stack.port, 20)
        done, marks, events, empty = 0, [], 0, 0
        while done < total:
            wave = min(concurrency, total - done)
            results = await asyncio.gather(*(stream(stack.port, payload) for _ in range(wave)))
            done += wave
            events += sum(count for _, _, count, _ in results)
            empty += sum(1 for _, _, count, _ in results if count == 0)  # refused or failed
            if done >= (len(marks) + 1) * total // 10:
                marks.append(rss_mb(stack.server.pid))
                print(
                    f"soak: {done} requests, server RSS {marks[-1]:.0f} MB "
                    f"({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    finally:
        stack.stop()
    print(
        f"soak: {total} requests ({concurrency} at a time, {workers} workers): server RSS "
        f"{marks[0]:.0f} MB after {total // 10}, {marks[-1]:.0f} MB after {total} "
        f"({(marks[-1] / marks[0] - 1) * 100:+.1f}%); {events} SSE events, "
        f"{empty} requests answered none"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default="generate,completions,llama.cpp")
    parser.add_argument("--api", default="chat", help="chat, responses or both (chat,responses)")
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--workers", default="1")
    parser.add_argument("--words", type=int, default=100, help="tokens per stream (about)")
    parser.add_argument("--pace", type=float, default=0.02, help="seconds between two tokens")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target-port", type=int, help="stream to this running server")
    parser.add_argument("--target-pid", type=int, help="whose CPU to count (--target-port)")
    parser.add_argument("--model", default=MODEL, help="the model name (--target-port)")
    parser.add_argument("--extra-body", help="JSON merged into each request (--target-port)")
    parser.add_argument(
        "--target-alone",
        action="store_true",
        help="count --target-pid's own CPU, not its children's (vLLM's API server, "
        "without its EngineCore)",
    )
    parser.add_argument("--soak", type=int, help="this many short requests: RSS growth")
    parser.add_argument(
        "--calls", action="store_true", help="count Python calls per streamed token instead"
    )
    args = parser.parse_args()
    if args.calls:
        print("| wire format | API | streams | Python calls per streamed token |")
        print("| --- | --- | --- | --- |")
        for wire, api in itertools.product(args.formats.split(","), args.api.split(",")):
            calls_per_token(wire, api, int(args.streams.split(",")[0]))
        return
    if args.soak:
        for workers in map(int, args.workers.split(",")):
            asyncio.run(soak(args.soak, int(args.streams.split(",")[0]), workers))
        return
    if args.target_port is not None:
        for streams in map(int, args.streams.split(",")):
            asyncio.run(against(args.target_port, args.target_pid, streams, args.words, args))
        return
    print("| wire format | API | streams | workers | server CPU us/token: median (runs) | "
          "delivered / offered tokens/s | TTFT p50 / p99 ms | ITL p50 / p99 ms |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for wire in args.formats.split(","):
        for api in args.api.split(","):
            for streams in map(int, args.streams.split(",")):
                for workers in map(int, args.workers.split(",")):
                    bench(wire, api, streams, workers, args.words, args.pace, args.repeat)


if __name__ == "__main__":
    main()
