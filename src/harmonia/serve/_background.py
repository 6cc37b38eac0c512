"""Background responses: their event logs, and cancelling them from any replica.

A background response runs in the replica that accepted it (its owner). A
cancel that reaches another replica sharing the store is passed on through
the store: that replica records a cancel request (:meth:`ResponseStore.request_cancel`),
the owner's :class:`CancelWatch` sees it within ``cancel_poll_s`` and cancels
the run exactly as a local cancel does, and the first replica waits (at most
``cancel_wait_s``) for the record to say so (:func:`cancel_elsewhere`).

A replica can die (SIGKILL, a lost host) with background responses running:
nothing is left to record how they ended. So the owner holds a *lease* on
each (:class:`LeaseKeeper`: renewed in the store every third of
``background_lease_s``), and any replica that reads a running response whose
lease ran out records it ``failed``, saying its replica is gone
(:func:`settle_orphan`).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import os
import socket
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any

from .._runtime import SSE_DONE, TIMEOUTS, sse_frame
from ..openai_compat import ending_events
from ..openai_compat._responses_stream import encode_event
from ._errors import APIError
from ._responses_input import RUNNING
from ._service import log
from ._store import Lease, ResponseStore, StoredResponse

JsonDict = dict[str, Any]


class BackgroundRun:
    """A background response running in this process: its task and its event log."""

    def __init__(self) -> None:
        self.events: list[JsonDict] = []
        self.done = False
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def publish(self, events: Sequence[JsonDict]) -> None:
        self.events.extend(events)
        self._changed.set()
        self._changed = asyncio.Event()

    def end(self) -> None:
        self.done = True
        self._changed.set()

    def cancel(self) -> bool:
        """Cancel the run's task if it still runs; whether it did."""
        if self.task is None or self.task.done():
            return False
        self.task.cancel()
        return True

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        """SSE frames of every event with ``sequence_number > after``, until the run ends."""
        position = 0
        while True:
            while position < len(self.events):
                event = self.events[position]
                position += 1
                if event.get("sequence_number", -1) > after:
                    yield frame(event)
            if self.done:
                yield DONE_FRAME
                return
            await self._changed.wait()


#: The last frame of every Responses stream (the OpenResponses spec: a server MUST send it).
DONE_FRAME = SSE_DONE


def frame(event: JsonDict) -> bytes:
    """One Responses stream event as an SSE frame."""
    return sse_frame(encode_event(event), event["type"])


class _Chore(abc.ABC):
    """Work a task repeats while ``runs`` is not empty (:meth:`wake` starts it when a run
    is added): nothing when the replica is idle."""

    enabled = True

    def __init__(self, store: ResponseStore, runs: dict[str, BackgroundRun]) -> None:
        self._store = store
        self._runs = runs
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Make sure the work runs (call after adding a run)."""
        if self.enabled and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._repeat())

    @abc.abstractmethod
    async def _repeat(self) -> None:
        """One round of the work (each subclass has its own)."""

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class CancelWatch(_Chore):
    """Cancels the runs in ``runs`` that another replica asked to cancel through the store:
    one :meth:`ResponseStore.cancel_requests` query per ``interval_s`` for all of them."""

    def __init__(
        self, store: ResponseStore, runs: dict[str, BackgroundRun], interval_s: float
    ) -> None:
        super().__init__(store, runs)
        self._interval = interval_s

    async def _repeat(self) -> None:
        failing = False
        while self._runs:
            await asyncio.sleep(self._interval)
            try:
                requested = await self._store.cancel_requests(list(self._runs))
            except Exception as exc:  # the store is down: keep running, say so once
                if not failing:
                    log.warning("cannot read cancel requests from the store: %s", exc)
                failing = True
                continue
            failing = False
            for response_id in requested:
                run = self._runs.get(response_id)
                if run is not None and run.cancel():
                    log.info("[%s] cancelled at another replica's request", response_id)


async def cancel_elsewhere(
    store: ResponseStore, record: StoredResponse, wait_s: float, poll_s: float
) -> StoredResponse:
    """Ask the replica running ``record`` to cancel it; the record once it has finished.

    Raises a 504 ``cancel_not_confirmed`` if it is still running after
    ``wait_s`` (its replica is gone, or too busy to look); the request stays
    recorded, so a later cancel may still find it confirmed.
    """
    await store.request_cancel(record.id, record.tenant)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        await asyncio.sleep(max(0.0, min(poll_s, deadline - loop.time())))
        current = await store.get(record.id, record.tenant)
        if current is None:
            raise APIError(
                404, f"response {record.id!r} was deleted meanwhile", code="response_not_found"
            )
        if current.status not in RUNNING:
            return current
        if loop.time() >= deadline:
            raise APIError(
                504,
                f"response {record.id!r} is {current.status} on another replica, which did not "
                f"confirm the cancel within {wait_s:g} s: that replica may have stopped (its "
                "response will then never finish) or be overloaded. The cancel request stays "
                "recorded; send the cancel again to check",
                code="cancel_not_confirmed",
            )


def replica_name(worker: int | None = None) -> str:
    """This process as a failure message names it: ``host:pid`` (``host:pid/wN`` for a
    ``--workers`` worker), so an operator can find the replica that died."""
    name = f"{socket.gethostname()}:{os.getpid()}"
    return name if worker is None else f"{name}/w{worker}"


class LeaseKeeper(_Chore):
    """Renews this replica's lease on each run in ``runs`` while any runs.

    Each renewal vouches for ``lease_s`` from ``now()`` (seconds since the
    epoch: replicas compare it with their own clocks) and comes every third
    of that, so two renewals may fail before the lease runs out; a renewal
    the store refuses is tried again after ``TIMEOUTS.store_retry``. A store
    without leases (a custom one written before them) gets none, and its
    runs are never reported orphaned.
    """

    def __init__(
        self,
        store: ResponseStore,
        runs: dict[str, BackgroundRun],
        owner: str,
        lease_s: float,
        now: Callable[[], float],
    ) -> None:
        super().__init__(store, runs)
        self.owner = owner
        self._lease_s = lease_s
        self._now = now
        self.enabled = callable(getattr(store, "renew_leases", None))

    async def renew(self, response_ids: Collection[str]) -> None:
        """Take (or renew) the lease on ``response_ids`` now."""
        if self.enabled and response_ids:
            lease = Lease(self.owner, self._now() + self._lease_s)
            await self._store.renew_leases(response_ids, lease)

    async def _repeat(self) -> None:
        failing = False
        while self._runs:
            try:
                await self.renew(list(self._runs))
            except Exception as exc:  # the store is down: keep running, say so once
                if not failing:
                    log.warning("cannot renew the leases of background responses: %s", exc)
                failing = True
                await asyncio.sleep(TIMEOUTS.store_retry)
                continue
            failing = False
            await asyncio.sleep(self._lease_s / 3)


#: What a background response whose replica died says failed (its ``error.message``).
ORPHAN_CAUSE = "the replica that ran it is gone"


async def settle_orphan(store: ResponseStore, record: StoredResponse, now: float) -> StoredResponse:
    """``record``, or, when it is a running background response whose lease ran out
    before ``now``, the ``failed`` record this writes in its place.

    A record without a lease (a store without leases, a replica of an older
    version) is left as it is: nothing says its replica is gone.
    """
    if record.status not in RUNNING or record.response.get("background") is not True:
        return record
    if not callable(getattr(store, "leases", None)):
        return record
    lease = (await store.leases([record.id])).get(record.id)
    if lease is None or lease.until >= now:
        return record
    message = (
        f"{ORPHAN_CAUSE} ({lease.owner}): it stopped renewing its lease on the response, "
        f"which ran out {now - lease.until:.1f} s ago, before the response finished"
    )
    failed = ending_events(record.response, 0, message=message)[0]["response"]
    settled = dataclasses.replace(record, response=failed)
    await store.put(settled)
    log.warning("[%s] %s", record.id, message)
    return settled
