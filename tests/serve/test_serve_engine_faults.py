"""Faults under load, nothing lost (issue 34, items 2 and 6): the engine's server killed
mid-stream and started again, clients that read slowly or never.

The engine is a fake vLLM server (``fake_engine.py``, a process on 127.0.0.1)
behind an in-process server. After each fault, every request has had a
terminal answer, the store holds no response left running, and ``/health``
and ``/metrics`` say what happened: no timing thresholds, only counts and states.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

import httpx
import pytest
from serve_support import MODEL, FakeEngineProcess, StreamReader, start_server

from harmonia.engines.vllm import VLLMEngine

RUNNING = ("queued", "in_progress")


def metric(server: Any, name: str, **labels: str) -> float:
    """One sample of ``/metrics`` (0 when absent)."""
    text = httpx.get(server.url + "/metrics").text
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def wait_for(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def chat(server: Any, stream: bool = True) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": stream}


def no_response_left_running(server: Any, ids: list[str]) -> None:
    for response_id in ids:
        status = httpx.get(f"{server.base_url}/responses/{response_id}").json()["status"]
        assert status not in RUNNING, (response_id, status)


@pytest.fixture
def fake() -> Any:
    engine = FakeEngineProcess(words=5000, pace=0.02)
    yield engine
    engine.kill()


def test_engine_killed_mid_load_then_back_without_restarting_harmonia(fake):
    server = start_server(lambda book: VLLMEngine(fake.url, api="generate"))
    try:
        chats = [StreamReader(server.base_url + "/chat/completions", chat(server)) for _ in "abc"]
        body = {"model": MODEL, "input": "Hi", "stream": True}
        streams = [StreamReader(server.base_url + "/responses", body) for _ in "abc"]
        background = [
            httpx.post(
                server.base_url + "/responses",
                json={"model": MODEL, "input": "Hi", "background": True},
                timeout=30,
            ).json()["id"]
            for _ in "ab"
        ]
        for reader in chats + streams:
            assert reader.started.wait(60) and reader.error is None, reader.error
        for response_id in background:
            wait_for(
                lambda rid=response_id: (
                    httpx.get(f"{server.base_url}/responses/{rid}").json()["status"]
                    == "in_progress"
                ),
                "the background response never started",
            )
        assert httpx.get(server.url + "/health").status_code == 200

        fake.kill()  # mid-stream, every generation running

        for reader in chats:  # the error travels in the stream (the SDK raises APIError)
            assert reader.payloads()[-1]["error"]["code"] == "engine_error"
        for reader in streams:
            events = reader.payloads()
            assert [event["type"] for event in events[-2:]] == ["response.failed", "error"]
        for response_id in background:
            wait_for(
                lambda rid=response_id: (
                    httpx.get(f"{server.base_url}/responses/{rid}").json()["status"] not in RUNNING
                ),
                "a background response stayed running",
            )
            failed = httpx.get(f"{server.base_url}/responses/{response_id}").json()
            assert failed["status"] == "failed"
        no_response_left_running(server, background)
        # Health and metrics say what is true.
        health = httpx.get(server.url + "/health")
        assert health.status_code == 503 and "engine is down" in health.json()["reason"]
        assert httpx.get(server.url + "/health/live").status_code == 200
        assert metric(server, "harmonia_ready") == 0
        assert (
            metric(server, "harmonia_requests_total", path="/v1/chat/completions", status="502")
            == 3
        )
        assert (
            metric(server, "harmonia_requests_total", path="/v1/chat/completions", status="200")
            == 0
        )
        assert metric(server, "harmonia_requests_total", path="/v1/responses", status="502") == 3
        assert metric(server, "harmonia_errors_total", kind="http_502") == 6
        assert metric(server, "harmonia_errors_total", kind="background_failed") == 2
        refused = httpx.post(server.base_url + "/chat/completions", json=chat(server, False))
        assert refused.status_code == 502

        back = FakeEngineProcess(words=3, pace=0.0, port=fake.port)  # the same address
        try:
            wait_for(
                lambda: httpx.get(server.url + "/health").status_code == 200,
                "readiness never came back",
            )
            assert metric(server, "harmonia_ready") == 1
            answer = httpx.post(server.base_url + "/chat/completions", json=chat(server, False))
            assert answer.status_code == 200
            assert answer.json()["choices"][0]["message"]["content"] == " word word word"
        finally:
            back.kill()
    finally:
        server.stop()


def test_slow_and_silent_clients_each_get_an_end(fake):
    # The silent client's answer is far larger than any socket buffers can hold (tens of
    # megabytes), so its writes must stall whatever the kernel's buffer sizes are; the other
    # requests ask for 2000 tokens of it.
    endless = FakeEngineProcess(words=200_000, pace=0.0)
    server = start_server(
        lambda book: VLLMEngine(endless.url, api="generate"),
        send_timeout_s=1.0,
        ping_interval_s=5,
    )
    try:
        # A client that never reads: its socket buffers fill, the write stalls, it is dropped.
        body = b'{"model": "%s", "input": "Hi", "stream": true, "max_output_tokens": 100000}' % (
            MODEL.encode()
        )
        with socket.socket() as silent:
            silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            host, port = server.url.removeprefix("http://").split(":")
            silent.connect((host, int(port)))
            silent.sendall(
                b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            service = server.app.state.service
            # Counted once, when the server gives up on it: no transient state to catch.
            wait_for(
                lambda: metric(server, "harmonia_errors_total", kind="client_stalled") == 1,
                "the silent client was never dropped",
            )
            wait_for(lambda: service.admission.running == 0, "the silent client's turn still runs")
        # A client that reads slowly gets all of it, to its terminal event.
        ask = {"model": MODEL, "input": "Hi", "max_output_tokens": 2000}
        with httpx.stream(
            "POST", server.base_url + "/responses", json={**ask, "stream": True}, timeout=90
        ) as answer:
            lines = []
            for piece in answer.iter_raw(4096):
                lines.append(piece)
                time.sleep(0.002)
        events = [line for line in b"".join(lines).split(b"\n") if line.startswith(b"event: ")]
        assert events[-1] == b"event: response.incomplete"
        final = httpx.post(server.base_url + "/responses", json=ask, timeout=60).json()
        no_response_left_running(server, [final["id"]])
        assert final["status"] == "incomplete"  # cut at its 2000 tokens, as asked
        assert service.open_streams == 0 and service.admission.running == 0
    finally:
        server.stop()
        endless.kill()


def test_admission_fits_what_the_engine_runs_at_once():
    from harmonia.engines.llamacpp import LlamaCppEngine
    from harmonia.serve._config import DEFAULT_MAX_CONCURRENT

    engine = FakeEngineProcess(3, 0.0, None, "--slots", "7")
    try:
        cases = [
            (lambda book: LlamaCppEngine(engine.url), {}, 7),  # llama-server's slots
            (lambda book: LlamaCppEngine(engine.url), {"max_concurrent": 5}, 5),  # the config
            # vLLM says nothing of its batch: the documented default.
            (lambda book: VLLMEngine(engine.url), {}, DEFAULT_MAX_CONCURRENT),
        ]
        for factory, config, expected in cases:
            server = start_server(factory, **config)
            try:
                assert server.app.state.service.admission.limit == expected
                answer = httpx.post(server.base_url + "/chat/completions", json=chat(server, False))
                assert answer.status_code == 200
            finally:
                server.stop()
    finally:
        engine.kill()
