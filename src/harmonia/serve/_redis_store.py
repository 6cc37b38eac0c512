"""A response store on Redis (redis-py's asyncio client): shared by replicas on many hosts."""

from __future__ import annotations

from collections.abc import Awaitable, Collection
from typing import Any, TypeVar

from harmonia import InputError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS

from ._store import SINGLE_TENANT, Lease, StoredResponse, StoreUnavailableError

_CANCEL = ":cancel"
_LEASE = ":lease"
T = TypeVar("T")


class RedisStore:
    """Responses as JSON strings under ``{prefix}{id}``, each kept ``ttl_s`` seconds.

    A cancel request is the key ``{prefix}{id}:cancel``, kept as long, and a
    lease ``{prefix}{id}:lease`` (``UNTIL OWNER``). The
    tenant is a field of the JSON; a record written before tenancy has none
    and is the single tenant's (served only by a server without API keys).

    ``url`` is a redis-py URL (``redis://host:6379/0``, ``rediss://...`` for
    TLS); a password in it is never shown in a repr or an error. Needs the
    ``redis`` package (``harmonia[serve-redis]``).

    A Redis that is down or restarting fails each call at once with
    :class:`StoreUnavailableError` (a connection refused; a Redis that hangs, after
    ``TIMEOUTS.store_reply`` for a connect or a reply, tried twice);
    the next call connects afresh, so the store works again as soon as Redis does.
    """

    def __init__(
        self, url: str, *, ttl_s: int | None = 30 * 24 * 3600, prefix: str = "harmonia:response:"
    ) -> None:
        try:
            import redis.asyncio
        except ImportError as exc:
            raise InputError(
                f"the Redis response store needs the redis package: {install_hint('serve-redis')}"
            ) from exc
        if ttl_s is not None and ttl_s < 1:
            raise InputError("RedisStore ttl_s must be at least 1 second, or None to keep forever")
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._errors = (redis.RedisError, OSError)
        self._client: Any = redis.asyncio.Redis.from_url(
            url,
            socket_connect_timeout=TIMEOUTS.store_reply,
            socket_timeout=TIMEOUTS.store_reply,
            # One immediate retry on a new connection: after a Redis restart every pooled
            # connection is dead, and the first call on each must not fail for that; while
            # Redis is down the retry fails too, at once (redis-py's default backs off
            # for seconds on each call, holding every request that touches the store).
            retry=Retry(NoBackoff(), 1),
        )
        self._ttl = ttl_s
        self._prefix = prefix

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self._prefix!r}, ttl_s={self._ttl})"

    async def _call(self, call: Awaitable[T]) -> T:
        """Await one client call; Redis's failures as :class:`StoreUnavailableError`
        (the message names no URL: it may hold a password)."""
        try:
            return await call
        except self._errors as exc:
            raise StoreUnavailableError("redis", type(exc).__name__ + ": " + str(exc)) from exc

    async def put(self, record: StoredResponse) -> None:
        await self._call(self._client.set(self._prefix + record.id, record.to_json(), ex=self._ttl))

    async def get(self, response_id: str, tenant: str = SINGLE_TENANT) -> StoredResponse | None:
        raw = await self._call(self._client.get(self._prefix + response_id))
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
            pipe.delete(key).delete(key + _CANCEL).delete(key + _LEASE)
            deleted, _, _ = await self._call(pipe.execute())
        return bool(deleted)

    async def request_cancel(self, response_id: str, tenant: str = SINGLE_TENANT) -> None:
        if await self.get(response_id, tenant) is None:
            return
        await self._call(self._client.set(self._prefix + response_id + _CANCEL, b"1", ex=self._ttl))

    async def _marks(self, response_ids: Collection[str], suffix: str) -> dict[str, bytes]:
        """The value of each ``{prefix}{id}{suffix}`` key that is set (one ``MGET``)."""
        ids = list(response_ids)
        if not ids:
            return {}
        values = await self._call(self._client.mget([self._prefix + i + suffix for i in ids]))
        return {i: value for i, value in zip(ids, values, strict=True) if value is not None}

    async def cancel_requests(self, response_ids: Collection[str]) -> set[str]:
        return set(await self._marks(response_ids, _CANCEL))

    async def renew_leases(self, response_ids: Collection[str], lease: Lease) -> None:
        if not response_ids:
            return
        value = f"{lease.until!r} {lease.owner}"
        async with self._client.pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.set(self._prefix + response_id + _LEASE, value, ex=self._ttl)
            await self._call(pipe.execute())

    async def leases(self, response_ids: Collection[str]) -> dict[str, Lease]:
        found: dict[str, Lease] = {}
        for response_id, value in (await self._marks(response_ids, _LEASE)).items():
            until, _, owner = value.decode().partition(" ")
            found[response_id] = Lease(owner, float(until))
        return found

    async def aclose(self) -> None:
        await self._client.aclose()
