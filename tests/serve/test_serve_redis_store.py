"""The Redis store: two server replicas share one conversation store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from serve_support import (
    ENC,
    MODEL,
    check_cancel_across_replicas,
    check_unconfirmed_cancel,
    orphan_record,
    redis_server,
)

from harmonia.serve import RedisStore, StoredResponse

pytest.importorskip("redis", reason="the redis package (harmonia[serve-redis]) is not installed")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    yield from redis_server()


def test_redis_store_round_trip(redis_url):
    record = StoredResponse("resp_r", {"id": "resp_r", "status": "completed"}, [], (1,), (2,))

    async def run() -> None:
        store = RedisStore(redis_url, ttl_s=60)
        await store.put(record)
        assert await store.get("resp_r") == record
        assert await store.cancel_requests(["resp_r"]) == set()
        await store.request_cancel("resp_r")
        await store.request_cancel("resp_r")  # idempotent
        assert await store.cancel_requests(["resp_r", "resp_s"]) == {"resp_r"}
        await store.put(record)  # rewriting the record keeps the request
        assert await store.cancel_requests(["resp_r"]) == {"resp_r"}
        assert await store.delete("resp_r") is True
        assert await store.get("resp_r") is None
        assert await store.cancel_requests(["resp_r"]) == set()  # gone with the record
        assert await store.delete("resp_r") is False
        await store.aclose()

    asyncio.run(run())
    assert "127.0.0.1" not in repr(RedisStore("redis://:hunter2@127.0.0.1:1/0"))


def test_two_replicas_share_conversations(make_server, redis_url):
    first, second = make_server(store=redis_url), make_server(store=redis_url)
    first.book.add("<|channel|>final<|message|>The code is 7.<|return|>")
    response = first.client().responses.create(model=MODEL, input="Pick a code")
    assert second.client().responses.retrieve(response.id).output_text == "The code is 7."
    second.book.add("<|channel|>final<|message|>It was 7.<|return|>")
    follow = second.client().responses.create(
        model=MODEL, input="Which code?", previous_response_id=response.id
    )
    assert follow.output_text == "It was 7."
    assert "The code is 7." in ENC.decode(list(second.engine.prompts[-1]))


def test_cancel_on_another_replica_reaches_the_owner(make_server, redis_url):
    owner, other = make_server(store=redis_url), make_server(store=redis_url)
    check_cancel_across_replicas(owner, other)


def test_cancel_of_a_response_whose_replica_is_gone_is_504(make_server, redis_url):
    server = make_server(store=redis_url, cancel_wait_s=0.5)
    orphan = orphan_record()  # what a replica killed mid-run leaves in the store

    async def put_and_check(cancel_requested: bool) -> None:
        store = RedisStore(redis_url, ttl_s=60)
        if cancel_requested:
            assert await store.cancel_requests([orphan.id, "resp_other"]) == {orphan.id}
        else:
            await store.put(orphan)
        await store.aclose()

    asyncio.run(put_and_check(False))
    check_unconfirmed_cancel(server, orphan.id, wait_s=0.5)
    asyncio.run(put_and_check(True))  # the request stays recorded for the owner
