"""Faults of the response store under load, nothing lost (issue 34, item 6): Redis
stopped and started again while requests run, and a replica killed while it owns
background responses.

No timing thresholds: each fault happens at a state the test waits for (the
engine holds every generation at a gate), and each check counts states and
answers; the bounds on the waits are generous, only there so a bug fails
instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import MODEL, RedisProcess, StreamReader, free_port, start_server

import harmonia
from harmonia.engines import Finish, Script, ScriptedEngine
from harmonia.serve import Lease, MemoryStore, SqliteStore, StoredResponse
from harmonia.serve._background import ORPHAN_CAUSE, settle_orphan

RUNNING = ("queued", "in_progress")
LONG = "<|channel|>final<|message|>" + "word " * 40 + "<|return|>"
#: Ids a gated generation sends before it waits at the gate (its first words included).
HEAD = 8


@dataclass
class GatedEngine(ScriptedEngine):
    """The scripted engine, holding every script longer than :data:`HEAD` ids after
    its first :data:`HEAD` until ``gate`` opens; ``held`` counts the generations
    waiting there (the short warm-up reply passes)."""

    gate: threading.Event = field(default_factory=threading.Event)
    held: int = 0

    async def _replay(self, script: Script, matcher: Any, emit: Any, top: int | None) -> Finish:
        if len(script.tokens) <= HEAD:
            return await super()._replay(script, matcher, emit, top)
        head = Script(script.tokens[:HEAD])
        await super()._replay(head, matcher, emit, top)
        self.held += 1
        while not self.gate.is_set():  # a state, polled: no duration matters
            await asyncio.sleep(0.01)
        self.held -= 1
        tail = Script(script.tokens[HEAD:])
        return await super()._replay(tail, matcher, emit, top)


def wait_for(check: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def errors_counted(url: str, kind: str) -> float:
    text = httpx.get(url + "/metrics").text
    line = f'harmonia_errors_total{{kind="{kind}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


def status_of(url: str, response_id: str) -> Any:
    return httpx.get(f"{url}/v1/responses/{response_id}", timeout=30)


class Post(threading.Thread):
    """One POST not streamed, in a thread: its answer once it came."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.answer: httpx.Response | None = None
        self.start()

    def run(self) -> None:
        self.answer = httpx.post(self.url, json=self.body, timeout=90)

    def result(self) -> httpx.Response:
        self.join(timeout=90)
        assert self.answer is not None, "the request never got an answer"
        return self.answer


def stored_records(url: str) -> list[dict[str, Any]]:
    """Every response record in the Redis store (cancel requests and leases left out)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = [k for k in client.scan_iter("harmonia:response:*") if k.count(b":") == 2]
        return [json.loads(raw)["response"] for raw in client.mget(keys) if raw is not None]
    finally:
        client.close()


# -- 1. Redis stopped and started again under load ------------------------------------------


def test_redis_restarted_under_load_every_request_answered_none_left_running(tmp_path):
    redis = RedisProcess(tmp_path)  # keeps its data across the restart, as production does
    gate = threading.Event()
    engine: list[GatedEngine] = []

    def build(book: Any) -> GatedEngine:
        engine.append(GatedEngine(book, gate=gate))
        return engine[0]

    server = start_server(build, store=redis.url)
    url, api = server.url, server.base_url
    try:
        for _ in range(5):
            server.book.add(LONG)
        body = {"model": MODEL, "input": "Hi"}
        streams = [
            StreamReader(api + "/responses", {**body, "stream": True}, started_after=2)
            for _ in "ab"
        ]
        plain = Post(api + "/responses", body)
        background = [
            httpx.post(api + "/responses", json={**body, "background": True}, timeout=30)
            for _ in "ab"
        ]
        assert [b.status_code for b in background] == [200, 200]
        ids = [b.json()["id"] for b in background]
        # Every generation runs (held at the gate) and every record says so.
        wait_for(lambda: engine[0].held == 5, "the five generations never all started")
        for response_id in ids:
            assert status_of(url, response_id).json()["status"] == "in_progress"

        redis.stop()

        # While Redis is down: each request that needs the store gets a 503 naming it.
        for answer in (
            status_of(url, ids[0]),
            httpx.post(api + "/responses", json={**body, "background": True}, timeout=30),
            httpx.post(api + "/responses", json={**body, "previous_response_id": ids[0]}),
        ):
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "store_unavailable" and "redis" in error["message"]
            assert answer.headers["retry-after"] == "1"

        gate.set()  # the generations finish while the store is still down

        for reader in streams:  # whole answers that could not be kept: a terminal event
            events = reader.payloads()
            assert [event["type"] for event in events[-2:]] == ["response.failed", "error"]
            assert "could not be stored" in events[-1]["message"]
            assert "response store (redis) is unavailable" in events[-1]["message"]
        answer = plain.result()
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable"
        # Two streams, then each background run's last record, refused and kept for later.
        wait_for(
            lambda: errors_counted(url, "store_unavailable") == 4,
            "the background runs never tried to store their ends",
        )
        for response_id in ids:  # still unreadable: nothing answered before the store did
            assert status_of(url, response_id).status_code == 503

        redis.start()  # the same port and data; harmonia is not restarted

        for response_id in ids:  # the runs store their ends once Redis is back
            wait_for(
                lambda rid=response_id: (
                    status_of(url, rid).status_code == 200
                    and status_of(url, rid).json()["status"] not in RUNNING
                ),
                "a background response stayed running",
            )
            assert status_of(url, response_id).json()["status"] == "completed"
        for _ in range(2):
            server.book.add("<|channel|>final<|message|>back<|return|>")
        fresh = httpx.post(api + "/responses", json=body, timeout=30)
        assert fresh.status_code == 200, fresh.text
        assert fresh.json()["output"][-1]["content"][0]["text"] == "back"
        follow = httpx.post(
            api + "/responses", json={**body, "previous_response_id": fresh.json()["id"]}
        )
        assert follow.status_code == 200, follow.text
        # The store holds nothing left running, and no request was a 500.
        records = stored_records(redis.url)
        assert len(records) == 4  # two background, then the two after the restart
        assert [r["status"] for r in records if r["status"] in RUNNING] == []
        assert "http_500" not in httpx.get(url + "/metrics").text
    finally:
        gate.set()
        server.stop()
        redis.stop()


# -- 2. a replica killed while it owns background responses ---------------------------------


def record(status: str, background: bool = True) -> StoredResponse:
    response = {"id": "resp_x", "object": "response", "status": status, "background": background}
    return StoredResponse("resp_x", response)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def any_store(request: Any, tmp_path: Path) -> Any:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "sqlite":
        yield SqliteStore(str(tmp_path / "store.db"))
    else:
        from harmonia.serve import RedisStore

        server = RedisProcess()
        try:
            yield RedisStore(server.url, ttl_s=60)
        finally:
            server.stop()


def test_a_lease_that_ran_out_settles_the_response_failed_on_read(any_store):
    """The rule, on an injected clock: a running background response is the owner's
    while its lease lasts, and failed (saying whose) once it ran out."""

    async def run() -> None:
        store = any_store
        await store.put(record("in_progress"))
        assert await store.leases(["resp_x"]) == {}
        # No lease (a replica of an older version): nothing says its replica is gone.
        assert (await settle_orphan(store, record("in_progress"), now=10**9)).status == (
            "in_progress"
        )
        await store.renew_leases(["resp_x"], Lease("host-a:41", 100.0))
        await store.renew_leases(["resp_x"], Lease("host-a:41", 130.0))  # renewed
        assert await store.leases(["resp_x", "resp_y"]) == {"resp_x": Lease("host-a:41", 130.0)}
        current = await store.get("resp_x")
        assert (await settle_orphan(store, current, now=130.0)).status == "in_progress"
        assert (await store.get("resp_x")).status == "in_progress"
        settled = await settle_orphan(store, current, now=131.5)
        assert settled.status == "failed"
        message = settled.response["error"]["message"]
        assert ORPHAN_CAUSE in message and "host-a:41" in message and "1.5 s" in message
        assert (await store.get("resp_x")).status == "failed"  # written for every replica
        # Finished responses and those not in the background are never settled.
        for done in (record("completed"), record("in_progress", background=False)):
            await store.put(done)
            assert (await settle_orphan(store, done, now=10**9)).status == done.status
        assert await store.delete("resp_x")
        assert await store.leases(["resp_x"]) == {}  # gone with the record
        await store.aclose()

    asyncio.run(run())


def replica(tmp_path: Path, store: str, name: str) -> tuple[subprocess.Popen[bytes], str]:
    """``harmonia serve`` as a process: one replica, long scripted answers."""
    script = tmp_path / f"{name}.json"
    script.write_text(json.dumps([LONG.replace("word " * 40, "word " * 5000)]))
    port = free_port()
    src = str(Path(harmonia.__file__).resolve().parents[1])  # the harmonia this test runs
    # The log to a file, not a pipe: a pipe nobody reads fills with the access log and
    # then blocks the server.
    with (tmp_path / f"{name}.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "harmonia.serve._cli", "--engine", "scripted", "--script",
             str(script), "--script-delay", "0.01", "--port", str(port), "--store", store,
             "--model", MODEL, "--background-lease", "2"],
            env={**os.environ, "PYTHONPATH": src}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: process.poll() is not None or ready(url), "the replica did not start")
    assert process.poll() is None, (tmp_path / f"{name}.log").read_text()
    return process, url


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/health").status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request: Any, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'store.db'}"
    else:
        server = RedisProcess()
        try:
            yield server.url
        finally:
            server.stop()


def test_a_replica_killed_while_it_owns_background_responses(tmp_path, shared_store):
    owner, owner_url = replica(tmp_path, shared_store, "owner")
    other, other_url = replica(tmp_path, shared_store, "other")
    try:
        body = {"model": MODEL, "input": "Hi", "background": True}
        ids = [httpx.post(owner_url + "/v1/responses", json=body).json()["id"] for _ in "ab"]
        for response_id in ids:  # running on the owner, seen so by the other replica
            wait_for(
                lambda rid=response_id: status_of(other_url, rid).json()["status"] == "in_progress",
                "the background response never started",
            )
        owner.send_signal(signal.SIGKILL)  # nothing left to record how they end
        owner.wait(timeout=30)
        # A continuation of one is refused while the lease may still be renewed, then
        # goes on from the failed response (not a 409 until someone happens to poll it).
        follow = {"model": MODEL, "input": "Go on", "previous_response_id": ids[0],
                  "max_output_tokens": 16}  # fmt: skip
        answers: list[httpx.Response] = []

        def continued() -> bool:
            answers.append(httpx.post(other_url + "/v1/responses", json=follow, timeout=60))
            return answers[-1].status_code != 409

        wait_for(continued, "a dead replica's response could never be continued")
        assert answers[-1].status_code == 200, answers[-1].text
        for response_id in ids:  # the lease runs out and the other replica says so
            wait_for(
                lambda rid=response_id: status_of(other_url, rid).json()["status"] == "failed",
                "a dead replica's response stayed running",
            )
            failed = status_of(other_url, response_id).json()
            message = failed["error"]["message"]
            assert ORPHAN_CAUSE in message and f":{owner.pid}" in message, message
            # Settled for good: a cancel answers it as it is (no 504 from a dead replica).
            cancel = httpx.post(f"{other_url}/v1/responses/{response_id}/cancel", timeout=30)
            assert cancel.status_code == 200 and cancel.json()["status"] == "failed"
        assert errors_counted(other_url, "background_orphaned") == 2
        # The other replica serves on: a new background response runs there.
        fresh = httpx.post(other_url + "/v1/responses", json=body).json()["id"]
        wait_for(
            lambda: status_of(other_url, fresh).json()["status"] == "in_progress",
            "the surviving replica did not run a new background response",
        )
        cancel = httpx.post(f"{other_url}/v1/responses/{fresh}/cancel", timeout=30)
        assert cancel.json()["status"] == "cancelled"  # its own: never taken for orphaned
    finally:
        for process in (owner, other):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                finally:
                    if process.poll() is None:
                        process.kill()
                        process.wait()


def test_the_lease_is_one_flag_with_one_default(capsys):
    from harmonia._runtime import TIMEOUTS
    from harmonia.serve import ServerConfig
    from harmonia.serve._cli import main

    assert ServerConfig().background_lease_s == TIMEOUTS.background_lease
    assert main(["--engine", "scripted", "--background-lease", "0"]) == 1
    assert "--background-lease must be > 0" in capsys.readouterr().err
