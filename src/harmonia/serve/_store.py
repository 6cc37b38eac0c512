"""Where stored responses live: a small async interface and two backends.

A record keeps what the model saw and said *as tokens* next to the API
objects, so a conversation continued with ``previous_response_id`` starts from
exactly the ids of the earlier turn. Next to the records the store keeps
*cancel requests*: the way a replica asks the replica running a background
response to cancel it, and *leases*: the running replica's word, renewed while
it runs, that it is still alive (a lease that ran out means its replica is gone).

A store that cannot answer (Redis down, a SQLite lock held past
``TIMEOUTS.store_busy``) raises :class:`StoreUnavailableError`; the server
answers it with a 503 ``store_unavailable``.

Every record belongs to a *tenant*: the API key that made it, kept as
:func:`tenant_id` (a slow salted hash of the key, never the key), or ``""``
when the server has no API keys. Each lookup names its tenant, and another
tenant's record answers exactly as a missing one does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import inspect
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar, runtime_checkable

from harmonia import HarmonyError, InputError
from harmonia._runtime import TIMEOUTS

JsonDict = dict[str, Any]
T = TypeVar("T")
P = ParamSpec("P")
#: Ids per ``IN (...)`` query of :class:`SqliteStore`.
_SQL_BATCH = 500
#: The tenant of a server without API keys (and of records written before tenancy).
SINGLE_TENANT = ""
_TENANT_SALT = b"harmonia.serve tenant v1"
_TENANT_ROUNDS = 250_000  # (not 200_000: that number spells a special-token id)


class StoreUnavailableError(HarmonyError):
    """The response store did not answer (down, unreachable, locked too long)."""

    def __init__(self, store: str, reason: object) -> None:
        self.store = store
        super().__init__(f"the response store ({store}) is unavailable: {reason}")


class Lease(NamedTuple):
    """Which replica runs a background response, and until when (seconds since the epoch,
    the owner's clock) it vouches for it."""

    owner: str
    until: float


def tenant_id(api_key: str) -> str:
    """The tenant an API key's responses belong to: a slow salted hash of the key.

    The same on every replica and across restarts (no secret to share); the key
    never reaches the store. PBKDF2-SHA256 with 250,000 rounds (about 0.1 s, once
    per key at start-up) makes guessing a short key from a stolen store slow, not
    impossible: use long random keys.

    >>> a = tenant_id("sk-example")
    >>> a == tenant_id("sk-example"), a.startswith("tenant_"), "sk-example" in a
    (True, True, False)
    """
    if not api_key:
        raise InputError("an empty API key names no tenant")
    digest = hashlib.pbkdf2_hmac("sha256", api_key.encode(), _TENANT_SALT, _TENANT_ROUNDS, dklen=16)
    return "tenant_" + digest.hex()


@dataclass(frozen=True)
class StoredResponse:
    """One stored response: the response object, its whole input, its tokens."""

    id: str
    response: JsonDict
    #: Every input item the model saw (earlier turns expanded), in order.
    context: list[JsonDict] = field(default_factory=list)
    prompt_tokens: tuple[int, ...] = ()
    completion_tokens: tuple[int, ...] = ()
    #: Whose it is (:func:`tenant_id` of the API key that made it; ``""``: no keys).
    tenant: str = SINGLE_TENANT

    @property
    def status(self) -> str:
        return str(self.response.get("status", ""))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))  # tuples: lists

    @classmethod
    def from_json(cls, text: str) -> StoredResponse:
        data = json.loads(text)
        return cls(
            id=data["id"],
            response=data["response"],
            context=data["context"],
            prompt_tokens=tuple(data["prompt_tokens"]),
            completion_tokens=tuple(data["completion_tokens"]),
            # A record written before tenancy has no owner: the single tenant's.
            tenant=data.get("tenant", SINGLE_TENANT),
        )


@runtime_checkable
class ResponseStore(Protocol):
    """What the server needs from a store; every method is safe to call concurrently.

    ``tenant`` scopes every lookup: a record of another tenant is ``None``
    (``False`` for :meth:`delete`, ignored by :meth:`request_cancel`), exactly
    as a missing one. Records are written by id (ids are the server's own,
    random); :meth:`put` keeps ``record.tenant``.
    """

    async def put(self, record: StoredResponse) -> None: ...

    async def get(self, response_id: str, tenant: str = SINGLE_TENANT) -> StoredResponse | None:
        """The record if it exists and is ``tenant``'s, else ``None``."""

    async def delete(self, response_id: str, tenant: str = SINGLE_TENANT) -> bool:
        """Forget ``tenant``'s response (and a cancel request for it); whether it was there."""

    async def request_cancel(self, response_id: str, tenant: str = SINGLE_TENANT) -> None:
        """Record that a client asked to cancel ``tenant``'s response (idempotent): a mark
        of its own, since the replica running the response keeps rewriting the record."""

    async def cancel_requests(self, response_ids: Collection[str]) -> set[str]:
        """Which of ``response_ids`` have a cancel request (one query, however many)."""

    async def renew_leases(self, response_ids: Collection[str], lease: Lease) -> None:
        """Record ``lease`` for each of ``response_ids`` (one query; never rewrites a record)."""

    async def leases(self, response_ids: Collection[str]) -> dict[str, Lease]:
        """The lease of each of ``response_ids`` that has one."""

    async def aclose(self) -> None: ...


class MemoryStore:
    """A bounded in-process store: the ``capacity`` most recently used responses.

    >>> import asyncio
    >>> store = MemoryStore(capacity=1)
    >>> async def demo():
    ...     await store.put(StoredResponse("resp_a", {"status": "completed"}))
    ...     await store.put(StoredResponse("resp_b", {"status": "completed"}))
    ...     return await store.get("resp_a"), (await store.get("resp_b")).id
    >>> asyncio.run(demo())
    (None, 'resp_b')

    Cancel requests are kept only for responses the store holds, and go with them:

    >>> async def cancel():
    ...     await store.request_cancel("resp_b")
    ...     await store.request_cancel("resp_gone")
    ...     return await store.cancel_requests(["resp_b", "resp_gone"])
    >>> asyncio.run(cancel())
    {'resp_b'}
    """

    def __init__(self, capacity: int = 1000) -> None:
        if capacity < 1:
            raise InputError("MemoryStore capacity must be at least 1")
        self._capacity = capacity
        self._records: OrderedDict[str, StoredResponse] = OrderedDict()
        self._cancels: set[str] = set()
        self._leases: dict[str, Lease] = {}

    async def put(self, record: StoredResponse) -> None:
        self._records[record.id] = record
        self._records.move_to_end(record.id)
        while len(self._records) > self._capacity:
            evicted, _ = self._records.popitem(last=False)
            self._cancels.discard(evicted)
            self._leases.pop(evicted, None)

    def _own(self, response_id: str, tenant: str) -> StoredResponse | None:
        record = self._records.get(response_id)
        return record if record is not None and record.tenant == tenant else None

    async def get(self, response_id: str, tenant: str = SINGLE_TENANT) -> StoredResponse | None:
        record = self._own(response_id, tenant)
        if record is not None:
            self._records.move_to_end(response_id)
        return record

    async def delete(self, response_id: str, tenant: str = SINGLE_TENANT) -> bool:
        if self._own(response_id, tenant) is None:
            return False
        self._cancels.discard(response_id)
        self._leases.pop(response_id, None)
        del self._records[response_id]
        return True

    async def request_cancel(self, response_id: str, tenant: str = SINGLE_TENANT) -> None:
        if self._own(response_id, tenant) is not None:  # bounded like the records
            self._cancels.add(response_id)

    async def cancel_requests(self, response_ids: Collection[str]) -> set[str]:
        return self._cancels.intersection(response_ids)

    async def renew_leases(self, response_ids: Collection[str], lease: Lease) -> None:
        for response_id in response_ids:
            if response_id in self._records:  # bounded like the records
                self._leases[response_id] = lease

    async def leases(self, response_ids: Collection[str]) -> dict[str, Lease]:
        return {i: self._leases[i] for i in response_ids if i in self._leases}

    async def aclose(self) -> None:
        self._records.clear()
        self._cancels.clear()
        self._leases.clear()


def _threaded(
    method: Callable[Concatenate[SqliteStore, P], T],
) -> Callable[Concatenate[SqliteStore, P], Coroutine[Any, Any, T]]:
    """``method`` run in a worker thread; SQLite's failures (a lock held past
    ``store_busy``, a disk that is full or gone) as :class:`StoreUnavailableError`."""

    @functools.wraps(method)
    async def call(self: SqliteStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await asyncio.to_thread(method, self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailableError("sqlite", exc) from exc

    return call


class SqliteStore:
    """Responses in a SQLite file: survives restarts; replicas on one host can share it.

    Calls run in a worker thread (never on the event loop); WAL mode lets
    several processes read while one writes. A file written before tenancy
    gets its ``tenant`` column on opening; its records are the single
    tenant's (served only by a server without API keys).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=TIMEOUTS.store_busy)
        with self._lock:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, record TEXT NOT NULL,"
                " tenant TEXT NOT NULL DEFAULT '')"
            )
            self._add_tenant_column()
            # Its own table: a replica rewriting a record never loses a cancel request.
            self._db.execute("CREATE TABLE IF NOT EXISTS cancel_requests (id TEXT PRIMARY KEY)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, owner TEXT NOT NULL,"
                " until REAL NOT NULL)"
            )
            self._db.commit()

    def _add_tenant_column(self) -> None:
        """Migrate a file of a version before tenancy (its records: the single tenant's)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        if "tenant" in columns:
            return
        try:
            self._db.execute("ALTER TABLE responses ADD COLUMN tenant TEXT NOT NULL DEFAULT ''")
        except sqlite3.OperationalError as exc:  # another replica migrated it meanwhile
            if "duplicate column" not in str(exc):
                raise

    @_threaded
    def put(self, record: StoredResponse) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (id, record, tenant) VALUES (?, ?, ?)",
                (record.id, record.to_json(), record.tenant),
            )
            self._db.commit()

    @_threaded
    def get(self, response_id: str, tenant: str = SINGLE_TENANT) -> StoredResponse | None:
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM responses WHERE id = ? AND tenant = ?", (response_id, tenant)
            ).fetchone()
        if row is None:
            return None
        # The column decides (a replica of an older version rewrites the JSON without one).
        return dataclasses.replace(StoredResponse.from_json(row[0]), tenant=tenant)

    @_threaded
    def delete(self, response_id: str, tenant: str = SINGLE_TENANT) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "DELETE FROM responses WHERE id = ? AND tenant = ?", (response_id, tenant)
            )
            if cursor.rowcount > 0:
                self._db.execute("DELETE FROM cancel_requests WHERE id = ?", (response_id,))
                self._db.execute("DELETE FROM leases WHERE id = ?", (response_id,))
            self._db.commit()
        return cursor.rowcount > 0

    @_threaded
    def request_cancel(self, response_id: str, tenant: str = SINGLE_TENANT) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO cancel_requests (id) "
                "SELECT id FROM responses WHERE id = ? AND tenant = ?",
                (response_id, tenant),
            )
            self._db.commit()

    @_threaded
    def cancel_requests(self, response_ids: Collection[str]) -> set[str]:
        return {row[0] for row in self._select("SELECT id FROM cancel_requests", response_ids)}

    def _select(self, query: str, response_ids: Collection[str]) -> list[Any]:
        """The rows of ``query WHERE id IN (...)`` for ``response_ids``."""
        ids, rows = list(response_ids), []
        with self._lock:
            # In slices: SQLite caps the parameters of one statement (999 before 3.32).
            for start in range(0, len(ids), _SQL_BATCH):
                batch = ids[start : start + _SQL_BATCH]
                marks = ",".join("?" * len(batch))
                rows += self._db.execute(f"{query} WHERE id IN ({marks})", batch).fetchall()
        return rows

    @_threaded
    def renew_leases(self, response_ids: Collection[str], lease: Lease) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO leases (id, owner, until) VALUES (?, ?, ?)",
                [(response_id, lease.owner, lease.until) for response_id in response_ids],
            )
            self._db.commit()

    @_threaded
    def leases(self, response_ids: Collection[str]) -> dict[str, Lease]:
        rows = self._select("SELECT id, owner, until FROM leases", response_ids)
        return {row[0]: Lease(row[1], row[2]) for row in rows}

    async def aclose(self) -> None:
        with self._lock:
            self._db.close()


def check_tenancy(store: ResponseStore) -> None:
    """Refuse at start-up, not at its first lookup, a store whose lookups take no
    ``tenant`` (written before tenancy)."""
    for name in ("get", "delete", "request_cancel"):
        method = getattr(store, name, None)
        if method is None or "tenant" not in inspect.signature(method).parameters:
            raise InputError(
                f"{type(store).__name__}.{name} takes no tenant: a ResponseStore's get, delete "
                "and request_cancel take (response_id, tenant) and answer only that tenant's "
                "records (see docs/serve.md, Tenants)"
            )


def open_store(spec: str, memory_capacity: int = 1000) -> ResponseStore | None:
    """The store a ``ServerConfig.store`` string names (``None`` for ``"none"``).

    ``"sqlite:PATH"``, ``"memory"``, ``"redis://HOST:PORT/DB"`` (``rediss://``
    with TLS; needs ``harmonia[serve-redis]``) or ``"none"``.
    """
    if spec == "none":
        return None
    if spec == "memory":
        return MemoryStore(memory_capacity)
    if spec.startswith("sqlite:"):
        return SqliteStore(spec.removeprefix("sqlite:"))
    if spec.startswith(("redis://", "rediss://")):
        from ._redis_store import RedisStore

        return RedisStore(spec)
    raise InputError("unknown store: use 'sqlite:PATH', 'redis://HOST:PORT/DB', 'memory' or 'none'")
