"""A response store on Redis (redis-py's asyncio client): shared by replicas on many hosts."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from harmonia import InputError

from ._store import SINGLE_TENANT, StoredResponse

_CANCEL = ":cancel"


class RedisStore:
    """Responses as JSON strings under ``{prefix}{id}``, each kept ``ttl_s`` seconds.

    A cancel request is the key ``{prefix}{id}:cancel``, kept as long. The
    tenant is a field of the JSON; a record written before tenancy has none
    and is the single tenant's (served only by a server without API keys).

    ``url`` is a redis-py URL (``redis://host:6379/0``, ``rediss://...`` for
    TLS); a password in it is never shown in a repr or an error. Needs the
    ``redis`` package (``harmonia[serve-redis]``).
    """

    def __init__(
        self, url: str, *, ttl_s: int | None = 30 * 24 * 3600, prefix: str = "harmonia:response:"
    ) -> None:
        try:
            import redis.asyncio
        except ImportError as exc:
            raise InputError(
                "the Redis response store needs the redis package: "
                "pip install 'harmonia[serve-redis]'"
            ) from exc
        if ttl_s is not None and ttl_s < 1:
            raise InputError("RedisStore ttl_s must be at least 1 second, or None to keep forever")
        self._client: Any = redis.asyncio.Redis.from_url(url)
        self._ttl = ttl_s
        self._prefix = prefix

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self._prefix!r}, ttl_s={self._ttl})"

    async def put(self, record: StoredResponse) -> None:
        await self._client.set(self._prefix + record.id, record.to_json(), ex=self._ttl)

    async def get(self, response_id: str, tenant: str = SINGLE_TENANT) -> StoredResponse | None:
        raw = await self._client.get(self._prefix + response_id)
        if raw is None:
            return None
        record = StoredResponse.from_json(raw.decode())
        return record if record.tenant == tenant else None

    async def delete(self, response_id: str, tenant: str = SINGLE_TENANT) -> bool:
        # A record's tenant never changes, so checking it first and deleting then is safe.
        if await self.get(response_id, tenant) is None:
            return False
        key = self._prefix + response_id
        async with self._client.pipeline(transaction=True) as pipe:
            deleted, _ = await pipe.delete(key).delete(key + _CANCEL).execute()
        return bool(deleted)

    async def request_cancel(self, response_id: str, tenant: str = SINGLE_TENANT) -> None:
        if await self.get(response_id, tenant) is None:
            return
        await self._client.set(self._prefix + response_id + _CANCEL, b"1", ex=self._ttl)

    async def cancel_requests(self, response_ids: Collection[str]) -> set[str]:
        ids = list(response_ids)
        if not ids:
            return set()
        marks = await self._client.mget([self._prefix + i + _CANCEL for i in ids])
        return {i for i, mark in zip(ids, marks, strict=True) if mark is not None}

    async def aclose(self) -> None:
        await self._client.aclose()
