"""``harmonia serve --workers N`` (issue 34, item 3): N processes on one port.

The command runs as a process on 127.0.0.1 with the scripted engine and a
shared store (SQLite here; Redis where redis-server is installed). Every
answer names its worker (``x-harmonia-worker``); each request opens a new
connection, which the kernel gives to either worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import free_port, redis_server

SRC = str(Path(__file__).resolve().parents[2] / "src")
MODEL = "m"


@pytest.fixture(params=["sqlite", "redis"])
def store(request: Any, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'store.db'}"
    else:
        yield from redis_server()


def serve(tmp_path: Path, store: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / "replies.json"
    text = "<|channel|>final<|message|>" + "word " * 3000 + "<|return|>"
    script.write_text(json.dumps([text]))  # each worker replays it: the same in both
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "harmonia.serve._cli", "--engine", "scripted", "--script",
         str(script), "--script-delay", "0.01", "--port", str(port), "--store", store,
         "--model", MODEL, "--workers", "2", "--cancel-wait", "30", *extra],
        env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    ready: set[str] = set()
    while len(ready) < 2:  # both workers answer ready
        assert time.monotonic() < deadline and process.poll() is None, "the workers did not start"
        try:
            answer = httpx.get(url + "/health")
            if answer.status_code == 200:
                ready.add(answer.headers["x-harmonia-worker"])
        except httpx.TransportError:
            time.sleep(0.1)
    return process, url


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return output


def test_two_workers_share_the_store_cancels_and_metrics(tmp_path, store):
    process, url = serve(tmp_path, store)
    try:
        answered: dict[str, int] = {}
        ids = []
        for _ in range(6):  # short answers, each on a new connection: both workers serve
            reply = httpx.post(
                url + "/v1/responses",
                json={"model": MODEL, "input": "Hi", "max_output_tokens": 5},
                timeout=60,
            )
            assert reply.status_code == 200
            worker = reply.headers["x-harmonia-worker"]
            answered[worker] = answered.get(worker, 0) + 1
            ids.append(reply.json()["id"])
        # Every response is found from every worker (the store is shared).
        seen = set()
        for response_id in ids * 3:
            got = httpx.get(f"{url}/v1/responses/{response_id}", timeout=30)
            assert got.status_code == 200
            seen.add(got.headers["x-harmonia-worker"])
        assert seen == {"0", "1"}
        # A long background response, polled and cancelled through whichever worker.
        started = httpx.post(
            url + "/v1/responses",
            json={"model": MODEL, "input": "Hi", "background": True},
            timeout=30,
        ).json()
        while True:
            polled = httpx.get(f"{url}/v1/responses/{started['id']}", timeout=30).json()
            if polled["status"] == "in_progress":
                break
            time.sleep(0.05)
        cancelled = httpx.post(f"{url}/v1/responses/{started['id']}/cancel", timeout=60)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        # /metrics sums both workers, whichever answers the scrape (each worker's own
        # numbers reach the others' scrapes within a second: wait until they did).
        total = sum(answered.values()) + 1  # and the background one
        scrapers: set[str] = set()
        deadline = time.monotonic() + 60
        while len(scrapers) < 2:
            assert time.monotonic() < deadline, "the metrics never added up"
            scrape = httpx.get(url + "/metrics")
            found = re.search(
                r'^harmonia_requests_total\{path="/v1/responses",status="200"\} (\S+)$',
                scrape.text,
                re.MULTILINE,
            )
            assert found is not None
            if float(found.group(1)) == total:
                scrapers.add(scrape.headers["x-harmonia-worker"])
            else:  # not yet published by the other worker: never more than the total
                assert float(found.group(1)) < total
                time.sleep(0.2)
    finally:
        output = stop(process)
    assert process.returncode == 0, output
    assert "Traceback" not in output


def test_more_than_one_worker_refuses_the_memory_store(capsys):
    from harmonia.serve._cli import main

    assert main(["--engine", "scripted", "--workers", "2"]) == 1
    assert "sqlite" in capsys.readouterr().err
