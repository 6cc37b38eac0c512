"""Graceful shutdown: stop admitting, let running generations finish, then end the rest.

``harmonia serve`` calls :meth:`Shutdown.drain` on the first SIGTERM/SIGINT
(a rolling deploy sends SIGTERM to every replica it replaces):

1. at once, ``/health`` answers 503 (``/health/live`` stays 200) and every new
   generation is refused with a 503 ``server_shutting_down``; the listening
   socket stays open, so probes and polls still get answers;
2. running generations (streams, answers not streamed, background responses)
   go on until they end or ``shutdown_timeout_s`` has passed;
3. each one still running is then ended: its stream gets its terminal event
   (``response.failed`` with the reason; a Chat stream its finish chunk and
   ``[DONE]``), a background response is stored as ``failed``, an answer not
   streamed is a 503. Only then does the ASGI server stop.

A second signal (:meth:`Shutdown.hurry`) skips what is left of the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from .._runtime import TIMEOUTS
from ._service import log

if TYPE_CHECKING:
    from ._responses import Responses
    from ._service import Service

#: How often the drain looks whether the running work has finished (a shutdown path only).
_POLL_S = TIMEOUTS.shutdown_poll
_REASON = "the server is shutting down"
#: How long the ended generations get to write their terminal events and close.
_CLOSE_S = TIMEOUTS.shutdown_close


class Shutdown:
    """The drain of one app's running work (``app.state.shutdown``)."""

    def __init__(self, service: Service, responses: Responses) -> None:
        self._service = service
        self._responses = responses
        self._hurry: asyncio.Event | None = None

    @property
    def busy(self) -> int:
        """Generations running or queued, background responses, SSE answers being written."""
        service = self._service
        admission = service.admission
        return (
            admission.running
            + admission.waiting
            + len(self._responses.background)
            + service.open_streams
        )

    def hurry(self) -> None:
        """End the running work now instead of at the timeout (a second signal)."""
        if self._hurry is not None:
            self._hurry.set()

    def begin(self) -> None:
        """Refuse new work from now on: ``/health`` 503, a new generation 503 (idempotent)."""
        if self._service.draining is None:
            self._service.draining = _REASON
            self._service.admission.close(_REASON + "; retry on another replica")

    async def drain(self, timeout_s: float) -> None:
        """Refuse new work, wait up to ``timeout_s`` for the running work, end what is left."""
        service = self._service
        self._hurry = asyncio.Event()
        self.begin()
        log.info(
            "shutting down: %d generations running, %d queued, %d background; waiting up to "
            "%g s for them",
            service.admission.running,
            service.admission.waiting,
            len(self._responses.background),
            timeout_s,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.busy and loop.time() < deadline and not self._hurry.is_set():
            await self._pause(min(_POLL_S, max(0.0, deadline - loop.time())))
        if self.busy:
            running = len(service.turns)
            log.warning(
                "shutdown timeout: ending %d running generations with a terminal event", running
            )
            why = f"{_REASON} (its shutdown timeout of {timeout_s:g} s ran out)"
            end = loop.time() + _CLOSE_S
            while self.busy and loop.time() < end:
                for turn in list(service.turns):  # and those admitted from the queue meanwhile
                    turn.interrupt(why)
                await asyncio.sleep(_POLL_S)
        log.info("shutdown: nothing left running")

    async def _pause(self, seconds: float) -> None:
        assert self._hurry is not None
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._hurry.wait(), seconds)
