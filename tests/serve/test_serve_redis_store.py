"""The Redis store: two server replicas share one conversation store."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from serve_support import ENC, MODEL, free_port

from harmonia.serve import RedisStore, StoredResponse

pytest.importorskip("redis", reason="the redis package (harmonia[serve-redis]) is not installed")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.skip("redis-server did not start on this machine")
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_redis_store_round_trip(redis_url):
    record = StoredResponse("resp_r", {"id": "resp_r", "status": "completed"}, [], (1,), (2,))

    async def run() -> None:
        store = RedisStore(redis_url, ttl_s=60)
        await store.put(record)
        assert await store.get("resp_r") == record
        assert await store.delete("resp_r") is True
        assert await store.get("resp_r") is None
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


def test_cancel_on_another_replica_is_409(make_server, redis_url):
    import openai

    owner, other = make_server(store=redis_url), make_server(store=redis_url)
    owner.book.add("<|channel|>final<|message|>slow<|return|>", stall_after=2)
    queued = owner.client().responses.create(model=MODEL, input="x", background=True)
    with pytest.raises(openai.ConflictError):
        other.client().responses.cancel(queued.id)
    assert owner.client().responses.cancel(queued.id).status == "cancelled"
