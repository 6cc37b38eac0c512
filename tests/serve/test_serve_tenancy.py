"""Server tenancy: with several API keys, each key sees only the responses it made.

Every stored object (a response, its input items, its background run, a
cancel request) belongs to the tenant of the key that made it; another key
gets exactly the 404 of an id that does not exist, in every store. The store
holds a tenant id derived from the key, never the key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from serve_support import MODEL, Server, free_port, orphan_record, redis_server, wait_healthy

from harmonia import InputError
from harmonia.engines import ScriptedEngine
from harmonia.serve import ServerConfig, StoredResponse, create_app, open_store, tenant_id

KEY_A = "sk-tenant-a-7f3e0c5d"
KEY_B = "sk-tenant-b-91c2aa40"
STORES = ("memory", "sqlite", "redis")
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    pytest.importorskip("redis", reason="the redis package (harmonia[serve-redis]) is missing")
    yield from redis_server()


def _store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'tenants.sqlite3'}"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture(params=STORES)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _store(request, tmp_path)


# Replicas share a SQLite file or Redis; a memory store is one process's own.
@pytest.fixture(params=[s for s in STORES if s != "memory"])
def shared_store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _store(request, tmp_path)


def unique(prefix: str) -> str:
    return f"{prefix}{time.monotonic_ns():024d}"


def test_tenant_ids_are_derived_from_the_key_never_the_key():
    a, b = tenant_id(KEY_A), tenant_id(KEY_B)
    assert a == tenant_id(KEY_A)  # the same on every replica and after a restart
    assert a != b and a and b
    for key, tenant in ((KEY_A, a), (KEY_B, b)):
        assert key not in tenant and key.removeprefix("sk-") not in tenant
    with pytest.raises(InputError):
        tenant_id("")  # no key is not a tenant: single-tenant mode is ""


def test_an_empty_api_key_is_refused():
    # "Authorization: Bearer " would match it: everyone would be that tenant.
    with pytest.raises(InputError, match="API key"):
        ServerConfig(api_keys=("sk-good", ""))
    assert ServerConfig().host == "127.0.0.1"  # loopback unless told otherwise


def test_each_store_keeps_records_and_cancels_to_their_tenant(store_spec):
    a, b = tenant_id(KEY_A), tenant_id(KEY_B)
    rid = unique("resp_t")
    record = StoredResponse(
        rid, {"id": rid, "status": "in_progress"}, [{"type": "message"}], (1,), (2,), tenant=a
    )

    async def run() -> None:
        store = open_store(store_spec)
        assert store is not None
        await store.put(record)
        assert await store.get(rid, a) == record
        assert await store.get(rid, b) is None
        assert await store.get(rid) is None  # single tenant: not a keyed tenant's record
        await store.request_cancel(rid, b)
        assert await store.cancel_requests([rid]) == set()  # another tenant's cancel: nothing
        assert await store.delete(rid, b) is False
        assert await store.get(rid, a) == record  # still there
        await store.request_cancel(rid, a)
        assert await store.cancel_requests([rid]) == {rid}
        await store.put(record)  # the owner rewriting the record keeps tenant and request
        assert await store.get(rid, a) == record
        assert await store.cancel_requests([rid]) == {rid}
        assert await store.delete(rid, a) is True
        assert await store.get(rid, a) is None
        await store.aclose()

    asyncio.run(run())


def test_a_store_that_takes_no_tenant_is_refused_at_start():
    class OldStore:  # a custom store written before tenancy
        async def put(self, record: StoredResponse) -> None: ...
        async def get(self, response_id: str) -> StoredResponse | None: ...
        async def delete(self, response_id: str) -> bool: ...
        async def request_cancel(self, response_id: str) -> None: ...
        async def cancel_requests(self, response_ids: Any) -> set[str]: ...
        async def aclose(self) -> None: ...

    engine = ScriptedEngine(lambda prompt: None)
    with pytest.raises(InputError, match="OldStore.get takes no tenant"):
        create_app(engine, ServerConfig(store="none"), store=OldStore())
    create_app(engine, ServerConfig(store="none"), store=open_store("memory"))


def _call(server: Server, key: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One raw request; a 200 event stream is not read (it may never end)."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream(
        method, server.base_url + path, headers=headers, timeout=20, **kwargs
    ) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        return response


def _same_404(theirs: httpx.Response, absent: httpx.Response, rid: str, missing: str) -> None:
    assert theirs.status_code == absent.status_code == 404, (theirs.status_code, theirs.content)
    assert theirs.headers["content-type"] == absent.headers["content-type"]
    assert theirs.headers["content-length"] == absent.headers["content-length"]
    assert theirs.content.replace(rid.encode(), b"ID") == absent.content.replace(
        missing.encode(), b"ID"
    )


def _missing_like(rid: str) -> str:
    """An id of the same shape (and length) that nobody made."""
    return rid[:-6] + ("000000" if not rid.endswith("000000") else "111111")


def _store_bytes(spec: str) -> bytes:
    """Everything the store wrote (the SQLite file and its WAL; every Redis key and value)."""
    if spec.startswith("sqlite:"):
        path = Path(spec.removeprefix("sqlite:"))
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    if spec.startswith("redis://"):
        import redis

        client = redis.Redis.from_url(spec)
        keys = list(client.scan_iter())
        return b"".join(keys) + b"".join(v for v in client.mget(keys) if v) if keys else b""
    return b""


def test_another_key_gets_the_404_of_a_missing_id(make_server, store_spec, caplog):
    caplog.set_level(logging.DEBUG)
    server = make_server(store=store_spec, api_keys=(KEY_A, KEY_B))
    a, b = server.client(api_key=KEY_A), server.client(api_key=KEY_B)
    server.book.add("<|channel|>final<|message|>A's secret is 7.<|return|>")
    done = a.responses.create(model=MODEL, input="A's question")
    server.book.add("<|channel|>final<|message|>never finishes<|return|>", stall_after=2)
    running = a.responses.create(model=MODEL, input="A's background job", background=True)
    deadline = time.monotonic() + 10
    while a.responses.retrieve(running.id).status != "in_progress":
        assert time.monotonic() < deadline, "the background response did not start"
        time.sleep(0.02)
    generation = server.engine.generations[-1]

    routes = [
        ("GET", "/responses/{}"),
        ("GET", "/responses/{}/input_items"),
        ("GET", "/responses/{}?stream=true"),  # a background run's event log
        ("GET", "/responses/{}?stream=true&starting_after=0"),
        ("POST", "/responses/{}/cancel"),
        ("DELETE", "/responses/{}"),
    ]
    for rid in (done.id, running.id):
        missing = _missing_like(rid)
        for method, path in routes:
            theirs = _call(server, KEY_B, method, path.format(rid))
            absent = _call(server, KEY_B, method, path.format(missing))
            _same_404(theirs, absent, rid, missing)
        # Continuing it (a finished one, or a running one: a 404, not A's 409).
        body = {"model": MODEL, "input": "What was A's secret?"}
        theirs, absent = (
            _call(server, KEY_B, "POST", "/responses", json={**body, "previous_response_id": i})
            for i in (rid, missing)
        )
        _same_404(theirs, absent, rid, missing)
        assert json.loads(theirs.content)["error"]["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(done.id)
    with pytest.raises(openai.NotFoundError):
        b.responses.input_items.list(done.id)

    # Nothing B did reached A's objects: A still reads, continues, cancels and deletes them.
    assert a.responses.retrieve(done.id).output_text == "A's secret is 7."
    assert a.responses.input_items.list(done.id).data
    assert a.responses.retrieve(running.id).status == "in_progress"
    assert not generation.done
    server.book.add("<|channel|>final<|message|>It was 7.<|return|>")
    follow = a.responses.create(model=MODEL, input="Which?", previous_response_id=done.id)
    assert follow.output_text == "It was 7."
    assert a.responses.cancel(running.id).status == "cancelled"
    assert generation.done
    a.responses.delete(done.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(done.id)

    # The keys reach neither the log nor the store.
    stored = _store_bytes(store_spec)
    for key in (KEY_A, KEY_B):
        assert key not in caplog.text
        assert key.encode() not in stored
    if store_spec != "memory":
        assert tenant_id(KEY_A).encode() in stored  # what the store keeps instead


def test_one_tenant_cancels_on_another_replica_only_its_own(make_server, shared_store_spec):
    store_spec = shared_store_spec
    owner = make_server(store=store_spec, api_keys=(KEY_A, KEY_B))
    other = make_server(store=store_spec, api_keys=(KEY_A, KEY_B))
    owner.book.add("<|channel|>final<|message|>never finishes<|return|>", stall_after=2)
    rid = owner.client(api_key=KEY_A).responses.create(model=MODEL, input="x", background=True).id
    deadline = time.monotonic() + 10
    while other.client(api_key=KEY_A).responses.retrieve(rid).status != "in_progress":
        assert time.monotonic() < deadline, "the background response did not start"
        time.sleep(0.02)
    generation = owner.engine.generations[-1]
    for method, path in (("POST", f"/responses/{rid}/cancel"), ("DELETE", f"/responses/{rid}")):
        assert _call(other, KEY_B, method, path).status_code == 404
    time.sleep(4 * owner.app.state.service.config.cancel_poll_s)  # the owner's watch looked
    assert not generation.done
    assert owner.client(api_key=KEY_A).responses.retrieve(rid).status == "in_progress"
    assert other.client(api_key=KEY_A).responses.cancel(rid).status == "cancelled"
    assert generation.done


def test_without_api_keys_every_request_is_the_one_tenant(make_server, store_spec):
    server = make_server(store=store_spec)
    first = server.client(api_key="anything").responses.create(model=MODEL, input="x")
    again = server.client(api_key="something else").responses.retrieve(first.id)
    assert again.id == first.id  # no keys: the key a client sends means nothing


def _legacy_json(record: StoredResponse) -> str:
    """A record as harmonia wrote it before tenancy (no tenant field)."""
    return json.dumps(
        {
            "id": record.id,
            "response": record.response,
            "context": record.context,
            "prompt_tokens": list(record.prompt_tokens),
            "completion_tokens": list(record.completion_tokens),
        }
    )


def _legacy_record() -> StoredResponse:
    record = orphan_record()
    return StoredResponse(record.id, {**record.response, "status": "completed"})


def test_a_sqlite_file_of_an_older_version_migrates(make_server, tmp_path):
    path = tmp_path / "old.sqlite3"
    legacy = _legacy_record()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, record TEXT NOT NULL)")
    db.execute("CREATE TABLE cancel_requests (id TEXT PRIMARY KEY)")
    db.execute("INSERT INTO responses VALUES (?, ?)", (legacy.id, _legacy_json(legacy)))
    db.commit()
    db.close()
    spec = f"sqlite:{path}"
    keyed = make_server(store=spec, api_keys=(KEY_A,))
    # Its owner is unknown: no key gets it, whichever key made it.
    assert _call(keyed, KEY_A, "GET", f"/responses/{legacy.id}").status_code == 404
    keyed.client(api_key=KEY_A).responses.create(model=MODEL, input="new")
    keyed.stop()
    # Without keys (single tenant, as it was written) it is there as before.
    single = make_server(store=spec)
    assert single.client().responses.retrieve(legacy.id).status == "completed"
    columns = [row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(responses)")]
    assert "tenant" in columns


def test_a_redis_record_of_an_older_version_is_the_single_tenants(redis_url):
    import redis

    legacy = _legacy_record()
    redis.Redis.from_url(redis_url).set("harmonia:response:" + legacy.id, _legacy_json(legacy))

    async def run() -> tuple[StoredResponse | None, StoredResponse | None]:
        store = open_store(redis_url)
        assert store is not None
        found = await store.get(legacy.id), await store.get(legacy.id, tenant_id(KEY_A))
        await store.aclose()
        return found

    single, keyed = asyncio.run(run())
    assert single == legacy and keyed is None


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* write them) listening on ``port``."""
    found = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if table.exists():
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                address, hex_port = fields[1].split(":")
                if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                    found.add(address)
    return found


def test_the_cli_binds_loopback_and_logs_no_key_even_at_debug(tmp_path):
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp to read the bound address from (not Linux)")
    port = free_port()
    store = tmp_path / "cli.sqlite3"
    env = {**os.environ, "PYTHONPATH": SRC, "HARMONIA_API_KEYS": f"{KEY_A},{KEY_B}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "harmonia.serve._cli", "--engine", "scripted", "--port",
         str(port), "--store", f"sqlite:{store}", "--model", "m", "--log-level", "debug",
         "--no-warmup"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/v1"
    try:
        wait_healthy(port)
        assert _listening(port) == {"0100007F"}  # 127.0.0.1 only, no --host given
        a = openai.OpenAI(base_url=base, api_key=KEY_A, max_retries=0, timeout=20)
        rid = a.responses.create(model="m", input="Hi").id
        for key, status in ((KEY_B, 404), ("sk-not-a-key", 401), (KEY_A, 200)):
            answer = httpx.get(
                f"{base}/responses/{rid}", headers={"Authorization": f"Bearer {key}"}
            )
            assert answer.status_code == status
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert " DEBUG " in output  # the most the server logs
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("cli.sqlite3*"))
    for key in (KEY_A, KEY_B):
        assert key not in output and key.encode() not in stored
