"""A fake engine server: vLLM's and llama-server's streaming wire formats, no model.

Run as a process (the fault tests kill and restart it; ``benchmarks/bench_serve.py``
puts ``harmonia serve`` in front of it)::

    python tests/serve/fake_engine.py PORT [--words N] [--pace SECONDS]

Every generation streams, one id per SSE event, a harmony final answer of
``N`` words (``<|channel|>final<|message|>`` + `` word`` x N + ``<|return|>``),
cut at the request's token limit; with ``--pace`` each stream waits that long
between two ids (all streams advance on one shared tick: the fake engine's own
cost stays small). It speaks:

* ``POST /inference/v1/generate`` (vLLM tokens in/out), ``POST /v1/completions``
  (vLLM, ``return_token_ids``), ``POST /completion`` (llama-server, ``tokens``);
* ``GET /health``: 200; ``GET /props``: ``{"total_slots": --slots}`` (llama-server's).

``--no-generate`` answers 404 on the generate endpoint, as vLLM does without
``--enable-scale-out``, so that harmonia falls back to ``/v1/completions``.
``--tail-pause SECONDS`` waits that long between a stream's last event and the
rest of its answer (``[DONE]``, the last chunk), which harmonia then reads in
the background to keep the connection.

Plain asyncio HTTP/1.1 with keep-alive and chunked bodies: no dependency, so
that what a benchmark measures is the server in front.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

RETURN = 200002


def answer_ids(words: int) -> list[int]:
    import harmonia

    enc = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
    head = enc.encode("<|channel|>final<|message|>", allowed_special="all")
    word = enc.encode(" word")
    return [*head, *(word * words), RETURN]


class Ticker:
    """One clock for every paced stream: each tick wakes all of them."""

    def __init__(self, pace: float) -> None:
        self.pace = pace
        self._tick: asyncio.Future[None] | None = None

    async def wait(self) -> None:
        if self.pace <= 0:
            await asyncio.sleep(0)
            return
        if self._tick is None or self._tick.done():
            loop = asyncio.get_running_loop()
            self._tick = loop.create_future()
            loop.call_later(self.pace, self._fire, self._tick)
        await self._tick

    @staticmethod
    def _fire(tick: asyncio.Future[None]) -> None:
        if not tick.done():
            tick.set_result(None)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: object) -> bytes:
    return _chunk(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")


class Fake:
    def __init__(
        self,
        ids: list[int],
        pace: float,
        generate: bool = True,
        slots: int = 4,
        tail_pause: float = 0.0,
    ) -> None:
        self.ids = ids
        self.slots = slots
        self.tail_pause = tail_pause
        self.ticker = Ticker(pace)
        self.paths = ("/v1/completions", "/completion") + (
            ("/inference/v1/generate",) if generate else ()
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if method == "GET" and path in ("/health", "/props"):
                    data = b'{"status":"ok"}'
                    if path == "/props":  # llama-server: its slots (--parallel)
                        data = b'{"total_slots":%d}' % self.slots
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    await writer.drain()
                    continue
                if method != "POST" or path not in self.paths:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                await self.stream(path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(self, path: str, body: dict, writer: asyncio.StreamWriter) -> None:
        if path == "/inference/v1/generate":
            limit = body["sampling_params"]["max_tokens"]
        elif path == "/v1/completions":
            limit = body["max_tokens"]
        else:
            limit = body["n_predict"]
        ids = self.ids[:limit]
        cut = len(ids) < len(self.ids)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for position, token in enumerate(ids):
            await self.ticker.wait()
            last = position == len(ids) - 1
            reason = None if not last else "length" if cut else "stop"
            if path == "/inference/v1/generate":
                choice = {"index": 0, "token_ids": [token], "finish_reason": reason}
                if reason == "stop":
                    choice["stop_reason"] = token
                event = {"request_id": "fake", "choices": [choice]}
            elif path == "/v1/completions":
                choice = {"index": 0, "text": "", "token_ids": [token], "finish_reason": reason}
                event = {"id": "cmpl-fake", "object": "text_completion", "choices": [choice]}
            else:
                event = {"content": "", "tokens": [token], "stop": last,
                         "tokens_predicted": position + 1}  # fmt: skip
                if last:
                    event["stop_type"] = "limit" if cut else "eos"
            writer.write(_event(event))
            await writer.drain()
        if self.tail_pause:
            await asyncio.sleep(self.tail_pause)
        if path != "/completion":
            writer.write(_chunk(b"data: [DONE]\n\n"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def main(
    port: int, words: int, pace: float, generate: bool, slots: int, tail_pause: float
) -> None:
    fake = Fake(answer_ids(words), pace, generate, slots, tail_pause)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument(
        "--no-generate",
        action="store_true",
        help="404 on vLLM's generate endpoint (as a "
        "server without --enable-scale-out: harmonia then uses /v1/completions)",
    )
    parser.add_argument("--slots", type=int, default=4, help="GET /props's total_slots")
    parser.add_argument("--tail-pause", type=float, default=0.0, help="seconds before [DONE]")
    args = parser.parse_args()
    generate = not args.no_generate
    asyncio.run(main(args.port, args.words, args.pace, generate, args.slots, args.tail_pause))
