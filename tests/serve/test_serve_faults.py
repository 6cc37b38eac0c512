"""Disconnects cancel the engine within one token; slow readers are dropped; health; metrics."""

from __future__ import annotations

import socket
import time

import httpx
from serve_support import MODEL

LONG = "<|channel|>final<|message|>" + "word " * 200 + "<|return|>"
DELAY = 0.05  # seconds per token: one engine step


def wait_done(generation, timeout: float = 5.0) -> float:
    """Seconds until ``generation`` finished (polling from the test thread)."""
    start = time.monotonic()
    while not generation.done:
        assert time.monotonic() - start < timeout, "the generation was not stopped"
        time.sleep(0.002)
    return time.monotonic() - start


def test_streaming_disconnect_cancels_within_one_token(srv):
    srv.book.add(LONG, delay=DELAY)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.stream("POST", srv.base_url + "/chat/completions", json=body) as response:
        lines = response.iter_lines()
        for _ in range(8):  # a few tokens arrive
            next(lines)
        generation = srv.engine.generations[-1]
        at_close = len(generation.tokens)
    # Leaving the block closed the connection.
    wait_done(generation)
    assert generation.finish.reason.value == "cancelled"
    assert len(generation.tokens) - at_close <= 1


def test_non_streaming_disconnect_cancels_within_one_token(srv):
    srv.book.add(LONG, delay=DELAY)
    body = {"model": MODEL, "input": "Hi"}
    try:
        httpx.post(srv.base_url + "/responses", json=body, timeout=0.4)
        raise AssertionError("the request should have timed out")
    except httpx.ReadTimeout:
        pass
    generation = srv.engine.generations[-1]
    at_close = len(generation.tokens)
    wait_done(generation)
    assert generation.finish.reason.value == "cancelled"
    assert len(generation.tokens) - at_close <= 1
    assert at_close < 20  # it did not run to the end (200+ tokens)


def test_slow_reader_is_dropped(make_server):
    server = make_server(
        send_timeout_s=0.3, ping_interval_s=5, context_tokens=10**7, max_output_tokens=10**6
    )
    # A long, fast stream to a client that never reads: the socket buffers fill up.
    server.book.add("<|channel|>final<|message|>" + "hello world " * 300, repeat=True)
    body = (
        b'{"model": "%s", "messages": [{"role": "user", "content": "Hi"}], "stream": true, '
        b'"max_tokens": 1000000}' % MODEL.encode()
    )
    host, port = server.url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: small window
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        time.sleep(0.2)
        generation = server.engine.generations[-1]
        wait_done(generation, timeout=10)
        assert generation.finish.reason.value == "cancelled"
        assert len(generation.tokens) < 1000000


def test_keep_alive_comments_while_the_engine_is_silent(make_server):
    server = make_server(ping_interval_s=0.1)
    server.book.add("<|channel|>final<|message|>late<|return|>", delay=0.5, chunk_size=10)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.stream("POST", server.base_url + "/chat/completions", json=body) as response:
        lines = list(response.iter_lines())
    assert ": keep-alive" in lines
    assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"


def test_health_waits_for_warmup_and_metrics_count(srv):
    assert httpx.get(srv.url + "/health").json()["status"] == "ok"
    if srv.engine.name != "scripted":  # (a scripted engine is not warmed: test_serve_clients)
        # Warm-up ran: the engine's first generation was one token.
        assert srv.engine.generations[0].finish.reason.value == "length"
        assert len(srv.engine.generations[0].tokens) == 1
    httpx.post(srv.base_url + "/chat/completions", content=b"{")
    srv.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    text = httpx.get(srv.url + "/metrics").text
    assert 'harmonia_requests_total{path="/v1/chat/completions",status="200"}' in text
    assert 'harmonia_errors_total{kind="http_400"}' in text
    assert "harmonia_time_to_first_token_seconds_count" in text
    assert "harmonia_queue_depth 0" in text
    assert "harmonia_generated_tokens_total" in text


def test_health_is_503_until_ready():
    import asyncio

    from harmonia.engines import Script, ScriptedEngine
    from harmonia.serve import ServerConfig, create_app

    engine = ScriptedEngine(lambda prompt: Script((200002,), delay=0.3))
    app = create_app(engine, ServerConfig(store="none"))

    async def run() -> tuple[int, int]:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        ):
            early = (await client.get("/health")).status_code
            await asyncio.sleep(0.6)
            late = (await client.get("/health")).status_code
        return early, late

    assert asyncio.run(run()) == (503, 200)
