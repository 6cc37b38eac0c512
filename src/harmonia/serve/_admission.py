"""Admission control: a limit of running generations and a bounded queue, then 429."""

from __future__ import annotations

import asyncio

from ._errors import APIError, ServerShuttingDown


class Admission:
    """At most ``limit`` generations at once; ``queue_size`` more may wait.

    A request beyond that is answered 429 at once with ``Retry-After``: an
    unbounded queue would turn overload into timeouts.
    """

    def __init__(self, limit: int, queue_size: int, retry_after_s: int) -> None:
        self.limit = limit
        self.queue_size = queue_size
        self.retry_after_s = retry_after_s
        self.running = 0
        self.waiting = 0
        self._free = asyncio.Semaphore(limit)
        #: Set when the server stops admitting (shutting down): why, for the 503.
        self.closed: str | None = None

    def resize(self, limit: int) -> None:
        """A new limit, before any request was admitted (start-up asked the engine)."""
        assert self.running == 0 and self.waiting == 0, "resize only before admitting"
        self.limit = limit
        self._free = asyncio.Semaphore(limit)

    def close(self, reason: str) -> None:
        """Admit nothing more: every later request, and every one still queued, gets a 503."""
        self.closed = reason

    def check(self) -> None:
        """429 now if a new request could not even wait in the queue (503 once closed)."""
        if self.closed is not None:
            raise ServerShuttingDown(self.closed)
        if self.running >= self.limit and self.waiting >= self.queue_size:
            raise APIError(
                429,
                f"the server is at capacity ({self.limit} generations running, "
                f"{self.waiting} waiting); retry after {self.retry_after_s} s",
                code="server_overloaded",
                headers={"Retry-After": str(self.retry_after_s)},
            )

    async def acquire(self) -> None:
        """Take a slot, waiting in the queue if needed; 429 when the queue is full."""
        self.check()
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        if self.closed is not None:  # closed while this one waited in the queue
            self._free.release()
            raise ServerShuttingDown(self.closed)
        self.running += 1

    def release(self) -> None:
        self.running -= 1
        self._free.release()
