"""``harmonia serve`` tunes the cyclic garbage collector once it has started (issue 34).

What start-up built is frozen (a full collection under load no longer walks
the vocabulary's tables) and the young generation is collected less often.
The CLI does it through ``Service.on_ready``, called once start-up succeeded,
before ``/health`` turns green; a start-up that fails never calls it.

That is only cheap while a request leaves nothing to the collector: each
streamed request, through each HTTP engine and API, must be freed by reference
counting alone, or its whole state waits for a collection (it did: an
exception kept in a future, a task kept by its watcher, a run and its hooks,
an answer and its pusher, the server's ``send`` in its own ``scope``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
from collections.abc import Iterator

import pytest
from serve_support import MODEL, FakeEngineProcess

from harmonia.engines import ScriptedEngine
from harmonia.serve import ServerConfig
from harmonia.serve._cli import GC_YOUNG_THRESHOLD, _tune_collector
from harmonia.serve._service import Service


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's collector as it was, afterwards."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_collector_is_tuned_once_started(collector: None) -> None:
    gc.unfreeze()
    older = gc.get_threshold()[1:]
    kept: list[object] = [object()]  # a tracked container that lives on
    assert any(obj is kept for obj in gc.get_objects())
    _tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *older)
    # Made before: frozen, in no generation a collection walks.
    assert all(obj is not kept for obj in gc.get_objects())


def test_on_ready_runs_once_when_start_up_succeeds() -> None:
    calls: list[bool] = []
    service = Service(ScriptedEngine([]), ServerConfig(warmup=False, store="none"))
    service.on_ready = lambda: calls.append(service.ready)
    asyncio.run(service.start())
    # Once, and before the service says it is ready (/health green).
    assert calls == [False] and service.ready


def test_on_ready_is_not_called_when_start_up_fails() -> None:
    class Broken(ScriptedEngine):
        async def max_sequences(self) -> int:  # asked when max_concurrent is not set
            raise RuntimeError("no")

    calls: list[bool] = []
    failed: list[bool] = []
    service = Service(Broken([]), ServerConfig(warmup=False, store="none", max_concurrent=None))
    service.on_ready = lambda: calls.append(True)
    service.on_start_failure = lambda: failed.append(True)
    asyncio.run(service.start())
    assert failed == [True] and calls == [] and not service.ready


def _stream(port: int, api: str) -> None:
    """One streamed request over a plain socket (an HTTP client library would leave
    cycles of its own), read to the end of the answer."""
    if api == "chat":
        path, fields = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}
    else:
        path, fields = "/v1/responses", {"input": "Hi", "store": False}
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 30, **fields}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"0\r\n\r\n"), answer[-200:]


@pytest.mark.parametrize(
    ("api", "kind", "tail_pause"),
    [
        ("chat", "vllm", 0.0),
        ("responses", "vllm", 0.0),
        ("chat", "llama.cpp", 0.0),
        ("responses", "llama.cpp", 0.0),
        # The answer's tail ([DONE], the last chunk) comes after the generation ended:
        # read in the background (Answer.close(drain=True)) to keep the connection.
        ("chat", "vllm", 0.05),
    ],
)
def test_a_streamed_request_leaves_no_cycle_to_collect(
    make_server, api: str, kind: str, tail_pause: float
) -> None:
    from harmonia.engines.llamacpp import LlamaCppEngine
    from harmonia.engines.vllm import VLLMEngine

    fake = FakeEngineProcess(12, 0.0, None, "--tail-pause", str(tail_pause))
    try:
        engine = (
            (lambda book: VLLMEngine(fake.url, api="generate"))
            if kind == "vllm"
            else (lambda book: LlamaCppEngine(fake.url))
        )
        server = make_server(engine, store="none")
        service = server.app.state.service
        port = int(server.url.rsplit(":", 1)[1])
        _stream(port, api)  # the first: lazily made tables, the engine's pool
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                _stream(port, api)
            # Until the server has let go of the three and the engine's connection is
            # back in the pool, its tail read (a guard, not what is asserted).
            wire = service.engine._http._wire
            for _ in range(2000):
                idle = service.admission.running == 0 and service.open_streams == 0
                if idle and not wire.draining and wire._idle:
                    break
                time.sleep(0.005)
            gc.collect()
            left = sorted({type(obj).__qualname__ for obj in gc.garbage})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert left == [], "a streamed request left objects to the cyclic collector"
    finally:
        fake.kill()
