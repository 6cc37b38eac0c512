"""One connection for many streamed requests: the HTTP engines keep theirs alive.

An engine's answer goes on past its last event (vLLM: ``data: [DONE]`` and the
last chunk). Closing the connection there made every request open a new one,
on harmonia's side and on the engine's. Here a keep-alive fake vLLM and a fake
llama-server count the connections they accept: a generation that ends at the
engine's own finish leaves its connection for the next; one that harmonia ends
while the engine still generates closes it, which is how the engine learns to
stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from http_engine_support import HANG_GUARD, PROMPT

from harmonia._runtime import TIMEOUTS
from harmonia.engines import FinishReason, SamplingParams, _wire
from harmonia.engines.llamacpp import LlamaCppEngine
from harmonia.engines.vllm import VLLMEngine

RETURN = 200002  # <|return|>: a stop id of every generation
#: Events a server that never finishes writes at most (a guard, not what is asserted).
ENDLESS = 2000


def _event(payload: Any) -> bytes:
    data = b"data: " + json.dumps(payload).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _payload(engine: str, token: int, last: bool) -> dict[str, Any]:
    if engine == "vllm":
        choice: dict[str, Any] = {"index": 0, "token_ids": [token]}
        choice["finish_reason"] = "stop" if last else None
        if last:
            choice["stop_reason"] = token
        return {"request_id": "r", "choices": [choice]}
    return {"content": "", "tokens": [token], "stop": last, "stop_type": "eos" if last else None}


class KeepAliveServer:
    """A fake engine server on 127.0.0.1 that keeps connections open and counts them.

    ``finishes``: whether it ends each stream at the stop id with its own finish
    (then the end of the answer follows in later writes), or goes on generating
    until the client closes the connection.
    """

    def __init__(self, engine: str, finishes: bool) -> None:
        self.engine, self.finishes = engine, finishes
        self.connections = 0
        self.requests = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                if head.startswith(b"GET"):
                    data = b'{"status":"ok","total_slots":4}'
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                    continue
                self.requests += 1
                await self._stream(writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the test is over (its loop cancels this handler)
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(_event(_payload(self.engine, 1008, last=False)))
        if self.finishes:
            writer.write(_event(_payload(self.engine, RETURN, last=True)))
            await writer.drain()
            await asyncio.sleep(0.01)  # the end of the answer in later reads
            if self.engine == "vllm":
                writer.write(b"e\r\ndata: [DONE]\n\n\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        # An engine that does not stop at the id harmonia stops at: it goes on generating.
        writer.write(_event(_payload(self.engine, RETURN, last=False)))
        for _ in range(ENDLESS):
            await asyncio.sleep(0.005)
            writer.write(_event(_payload(self.engine, 1008, last=False)))
            await writer.drain()  # raises once the client has closed the connection
        raise ConnectionError("the client never left")  # pragma: no cover - a failed test


def _engine(kind: str, port: int) -> Any:
    url = f"http://127.0.0.1:{port}"
    return VLLMEngine(url, api="generate") if kind == "vllm" else LlamaCppEngine(url)


async def _two_generations(
    kind: str, finishes: bool
) -> tuple[KeepAliveServer, list[Any], list[int]]:
    """Two generations in turn; the server, their finishes, and how many connections
    were kept for their answer's tail right as each generation ended."""
    server = KeepAliveServer(kind, finishes)
    await server.start()
    engine = _engine(kind, server.port)
    finishes_seen = []
    kept = []
    try:
        for _ in range(2):
            result = await engine.generate(PROMPT, SamplingParams(max_tokens=50)).result()
            finishes_seen.append(result.finish)
            kept.append(len(engine._http._wire.draining))
            # The tail comes 10 ms after the finish; wait (bounded) until it was read.
            for _ in range(int(HANG_GUARD / 0.01)):
                if not engine._http._wire.draining:
                    break
                await asyncio.sleep(0.01)
    finally:
        await engine.aclose()
        server.close()
    return server, finishes_seen, kept


@pytest.mark.parametrize("kind", ["vllm", "llama.cpp"])
def test_generations_that_end_at_the_engines_finish_share_one_connection(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tail's bound as long as the hang guard: however slow the machine, the tail
    # (sent 10 ms after the finish) comes within it.
    monkeypatch.setattr(_wire, "TIMEOUTS", dataclasses.replace(TIMEOUTS, engine_tail=HANG_GUARD))
    server, finishes, _ = asyncio.run(_two_generations(kind, finishes=True))
    assert [finish.reason for finish in finishes] == [FinishReason.STOP] * 2
    assert server.requests == 2
    assert server.connections == 1


@pytest.mark.parametrize("kind", ["vllm", "llama.cpp"])
def test_a_generation_harmonia_ends_while_the_engine_goes_on_closes_its_connection(
    kind: str,
) -> None:
    server, finishes, kept = asyncio.run(_two_generations(kind, finishes=False))
    assert [finish.reason for finish in finishes] == [FinishReason.STOP] * 2
    assert [finish.stop_token for finish in finishes] == [RETURN] * 2
    assert kept == [0, 0]  # closed at once, not kept for a tail that would not end
    assert server.requests == 2
    assert server.connections == 2
