"""Response stores: bounded memory, SQLite that survives a restart."""

from __future__ import annotations

import asyncio

import openai
import pytest
from serve_support import (
    MODEL,
    check_cancel_across_replicas,
    check_unconfirmed_cancel,
    orphan_record,
)

from harmonia.serve import MemoryStore, SqliteStore, StoredResponse


def record(n: int) -> StoredResponse:
    return StoredResponse(
        f"resp_{n}",
        {"id": f"resp_{n}", "status": "completed"},
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "é"}]}],
        (1, 2, 3),
        (4, 200002),
    )


def test_memory_store_is_bounded_and_lru():
    async def run() -> list[str | None]:
        store = MemoryStore(capacity=2)
        for n in range(2):
            await store.put(record(n))
        await store.get("resp_0")  # recently used: resp_1 goes first
        await store.put(record(2))
        found = [await store.get(f"resp_{n}") for n in range(3)]
        return [r.id if r else None for r in found]

    assert asyncio.run(run()) == ["resp_0", None, "resp_2"]


def test_sqlite_store_round_trips_and_deletes(tmp_path):
    async def run() -> None:
        store = SqliteStore(str(tmp_path / "r.sqlite3"))
        await store.put(record(1))
        await store.aclose()
        store = SqliteStore(str(tmp_path / "r.sqlite3"))
        assert await store.get("resp_1") == record(1)
        await store.request_cancel("resp_1")
        await store.request_cancel("resp_1")  # idempotent
        await store.put(record(1))  # rewriting the record keeps the request
        assert await store.cancel_requests(["resp_1", "resp_2"]) == {"resp_1"}
        # More ids than one SQLite statement takes: asked in slices.
        many = [f"resp_{n}" for n in range(2, 2500)]
        assert await store.cancel_requests([*many, "resp_1"]) == {"resp_1"}
        assert await store.delete("resp_1") is True
        assert await store.cancel_requests(["resp_1"]) == set()  # gone with the record
        assert await store.delete("resp_1") is False
        assert await store.get("resp_1") is None
        await store.aclose()

    asyncio.run(run())


def test_server_restart_keeps_responses(make_server, tmp_path):
    spec = f"sqlite:{tmp_path / 'responses.sqlite3'}"
    first = make_server(store=spec)
    first.book.add("<|channel|>final<|message|>Remember 42.<|return|>")
    response = first.client().responses.create(model=MODEL, input="Remember a number")
    first.stop()
    second = make_server(store=spec)
    client = second.client()
    again = client.responses.retrieve(response.id)
    assert again.output_text == "Remember 42."
    second.book.add("<|channel|>final<|message|>It was 42.<|return|>")
    follow = client.responses.create(
        model=MODEL, input="Which number?", previous_response_id=response.id
    )
    assert follow.output_text == "It was 42."
    from serve_support import ENC

    assert "Remember 42." in ENC.decode(list(second.engine.prompts[-1]))


def test_no_store_means_404_for_continuations(make_server):
    server = make_server(store="none")
    response = server.client().responses.create(model=MODEL, input="x")
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().responses.create(model=MODEL, input="y", previous_response_id=response.id)
    assert "stores no responses" in caught.value.message


def test_shutdown_records_running_background_responses_as_cancelled(make_server, tmp_path):
    spec = f"sqlite:{tmp_path / 'shutdown.sqlite3'}"
    first = make_server(store=spec)
    first.book.add("<|channel|>final<|message|>never finishes<|return|>", stall_after=2)
    queued = first.client().responses.create(model=MODEL, input="x", background=True)
    first.stop()
    second = make_server(store=spec)
    assert second.client().responses.retrieve(queued.id).status == "cancelled"


def test_memory_store_keeps_cancel_requests_only_with_their_records():
    async def run() -> tuple[set[str], set[str]]:
        store = MemoryStore(capacity=2)
        for n in range(2):
            await store.put(record(n))
        await store.request_cancel("resp_0")
        before = await store.cancel_requests(["resp_0", "resp_1"])
        await store.put(record(2))  # evicts resp_0, and its request with it
        await store.put(record(0))
        return before, await store.cancel_requests(["resp_0"])

    assert asyncio.run(run()) == ({"resp_0"}, set())


def test_two_replicas_on_one_sqlite_file_cancel_each_others_responses(make_server, tmp_path):
    spec = f"sqlite:{tmp_path / 'shared.sqlite3'}"
    owner, other = make_server(store=spec), make_server(store=spec)
    check_cancel_across_replicas(owner, other)


def test_cancel_of_a_response_whose_replica_is_gone_answers_504(make_server, tmp_path):
    path = str(tmp_path / "orphan.sqlite3")
    server = make_server(store=f"sqlite:{path}", cancel_wait_s=0.3)
    orphan = orphan_record()
    store = SqliteStore(path)
    asyncio.run(store.put(orphan))
    check_unconfirmed_cancel(server, orphan.id, wait_s=0.3)
    assert asyncio.run(store.cancel_requests([orphan.id])) == {orphan.id}
    asyncio.run(store.aclose())
