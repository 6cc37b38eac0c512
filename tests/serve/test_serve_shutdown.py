"""Graceful shutdown of ``harmonia serve`` as a process (issue 34, item 5).

Each test runs the real command on 127.0.0.1 with the scripted engine, opens a
Chat stream, a Responses stream and a background response, signals the
process and counts what each client got and what the store holds. The
replies are long (thousands of paced tokens) where a stream must still be
running when the shutdown ends it, short where it must finish.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from serve_support import free_port

SRC = str(Path(__file__).resolve().parents[2] / "src")
MODEL = "m"


class Served:
    """``harmonia serve --engine scripted`` in a subprocess, its output captured."""

    def __init__(self, tmp_path: Path, words: int, timeout_s: float) -> None:
        script = tmp_path / "replies.json"
        text = "<|channel|>final<|message|>" + "word " * words + "<|return|>"
        script.write_text(json.dumps([text]))
        self.db = tmp_path / "store.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harmonia.serve._cli", "--engine", "scripted",
             "--script", str(script), "--script-delay", "0.02", "--port", str(self.port),
             "--store", f"sqlite:{self.db}", "--model", MODEL,
             "--shutdown-timeout", str(timeout_s)],
            env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and self.process.poll() is None, "no start"
            try:
                if httpx.get(self.url + "/health").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)

    def signal(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def wait_draining(self) -> None:
        """Until ``/health`` says 503 (the first signal was handled)."""
        deadline = time.monotonic() + 30
        while httpx.get(self.url + "/health").status_code != 503:
            assert time.monotonic() < deadline, "readiness never went 503"
            time.sleep(0.02)

    def finish(self) -> str:
        try:
            output, _ = self.process.communicate(timeout=90)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.communicate()
        return output

    def stored(self, response_id: str) -> dict[str, Any]:
        with sqlite3.connect(self.db) as db:
            (record,) = db.execute("SELECT record FROM responses WHERE id = ?", (response_id,))
        return dict(json.loads(record[0])["response"])


class Reader(threading.Thread):
    """One streamed request: every SSE ``data:`` payload it got, and when the first came."""

    def __init__(self, url: str, path: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.path, self.body = url, path, body
        self.data: list[str] = []
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + self.path, json=self.body, timeout=90) as answer:
                assert answer.status_code == 200
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        self.data.append(line[6:])
                        if len(self.data) >= 3:
                            self.started.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.started.set()

    def events(self) -> list[dict[str, Any]]:
        self.join(timeout=90)
        assert self.error is None, self.error
        return [json.loads(data) for data in self.data if data != "[DONE]"]


def start_work(served: Served) -> tuple[Reader, Reader, str]:
    """A Chat stream, a Responses stream and a background response, all generating."""
    chat = Reader(
        served.url,
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True},
    )
    responses = Reader(served.url, "/v1/responses", {"model": MODEL, "input": "Hi", "stream": True})
    answer = httpx.post(
        served.url + "/v1/responses",
        json={"model": MODEL, "input": "Hi", "background": True},
        timeout=30,
    )
    background = answer.json()["id"]
    for reader in (chat, responses):
        assert reader.started.wait(60) and reader.error is None, reader.error
    deadline = time.monotonic() + 30
    while served.stored(background)["status"] != "in_progress":
        assert time.monotonic() < deadline, "the background response never started"
        time.sleep(0.05)
    return chat, responses, background


def check_refused_while_draining(served: Served) -> None:
    assert httpx.get(served.url + "/health").status_code == 503
    assert httpx.get(served.url + "/health/live").status_code == 200
    refused = httpx.post(
        served.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
        timeout=30,
    )
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "server_shutting_down"


def check_ended_by_the_server(chat: Reader, responses: Reader, served: Served, bg: str) -> None:
    chunks = chat.events()
    assert chat.data[-1] == "[DONE]"
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert reasons[-1] == "length" and reasons.count("length") == 1
    events = responses.events()
    kinds = [event["type"] for event in events]
    assert kinds[-2:] == ["response.failed", "error"]
    assert "response.completed" not in kinds
    assert "shut down" in events[-2]["response"]["error"]["message"]
    assert served.stored(bg)["status"] == "failed"


def shut_down(
    tmp_path: Path, *, words: int, timeout_s: float, drained: bool, signals: int
) -> tuple[Served, Reader, Reader, str]:
    """Start the server, give it its work, and signal it ``signals`` times; it must exit cleanly.

    ``drained``: after the first signal, wait until it drains and check that it refuses
    new work meanwhile. What comes back is the server and its work, to check how it ended.
    """
    served = Served(tmp_path, words=words, timeout_s=timeout_s)
    try:
        chat, responses, background = start_work(served)
        served.signal()
        if drained:
            served.wait_draining()
            check_refused_while_draining(served)
        for _ in range(signals - 1):
            served.signal()
    finally:
        output = served.finish()
    assert served.process.returncode == 0, output
    assert "Traceback" not in output and "Exception in ASGI" not in output
    return served, chat, responses, background


def test_running_streams_finish_before_the_server_stops(tmp_path):
    served, chat, responses, background = shut_down(
        tmp_path, words=300, timeout_s=300, drained=True, signals=1
    )
    assert chat.data[-1] == "[DONE]"
    assert [c["choices"][0]["finish_reason"] for c in chat.events() if c["choices"]][-1] == "stop"
    assert responses.events()[-1]["type"] == "response.completed"
    assert served.stored(background)["status"] == "completed"


def test_the_shutdown_timeout_ends_each_stream_with_its_terminal_event(tmp_path):
    served, chat, responses, background = shut_down(
        tmp_path, words=5000, timeout_s=0.5, drained=False, signals=1
    )
    check_ended_by_the_server(chat, responses, served, background)


def test_a_second_signal_ends_the_running_work_at_once(tmp_path):
    served, chat, responses, background = shut_down(
        tmp_path, words=5000, timeout_s=3600, drained=True, signals=2
    )
    check_ended_by_the_server(chat, responses, served, background)
