"""Page conversion off the event loop, within a size and a time budget.

A web page is whatever its server sends, so converting it (lxml, then the
pure-Python html2text) is work a stranger chooses the size of. The web
backends hand it to a :class:`PageConverter`: a page over ``max_chars`` is
refused before any work, the rest is converted in a worker process (or a
thread), and a conversion that outlives ``timeout`` seconds is abandoned (its
process killed). Either way the model reads why the page is not shown, and
the event loop that serves every other conversation never runs the
conversion itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from harmonia import InputError, ToolError
from harmonia._runtime import TIMEOUTS

from ._page import Page

DEFAULT_MAX_CHARS = 8_000_000
"""Characters of HTML a page may have (the largest ordinary pages have a few million)."""
DEFAULT_TIMEOUT = TIMEOUTS.page_conversion
"""Seconds a conversion may take (harmonia._runtime.TIMEOUTS holds every default)."""
DEFAULT_WORKERS = 2
DEFAULT_MEMORY_LIMIT = 4 << 30
"""Bytes of address space a worker process may use (Linux; an 8 MB page needs well under 1 GiB)."""


def _convert_html(html: str, url: str, title: str, show_url: bool) -> Page:
    from ._html import html_to_page

    return html_to_page(html, url, title, show_url=show_url)


def _worker_main(conn: Connection, memory_limit: int) -> None:
    # One job at a time: (function, args) in, ("ok", value) or ("error", text) out.
    if memory_limit:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        except (ImportError, ValueError, OSError):  # pragma: no cover - not Linux
            pass
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as e:
            reply = ("error", str(e) or type(e).__name__)
        conn.send(reply)


class _Worker:
    def __init__(self, memory_limit: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a threaded server
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, memory_limit),
            name="harmonia-page-converter",
            daemon=True,
        )
        self.process.start()
        child.close()

    def exchange(self, job: tuple[Callable[..., Any], tuple[Any, ...]]) -> tuple[str, Any]:
        self.conn.send(job)
        reply: tuple[str, Any] = self.conn.recv()
        return reply

    def kill(self) -> None:
        # A thread blocked on the pipe then reads EOF; it closes the pipe itself.
        self.process.kill()

    def close(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class _Job:
    """One conversion: which worker runs it, and whether its caller gave up on it."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.lock = threading.Lock()
        self.worker: _Worker | None = None
        self.abandoned = False
        self.done = False

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            worker = None if self.done else self.worker
        if worker is not None:
            worker.kill()


class PageConverter:
    """Converts fetched HTML into pages without holding the event loop, within budgets.

    ``workers`` processes (started on first use, kept for the next pages) do
    the work, each within ``memory_limit`` bytes of address space (Linux; 0:
    no limit); ``workers=0`` uses threads instead (no process start-up, but a
    conversion past its time cannot be stopped, only abandoned: the size
    budget bounds it). ``max_chars`` and ``timeout`` are the budgets.
    """

    def __init__(
        self,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        timeout: float = DEFAULT_TIMEOUT,
        workers: int = DEFAULT_WORKERS,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        if max_chars < 1 or timeout <= 0 or workers < 0 or memory_limit < 0:
            raise InputError(
                "max_chars and timeout must be positive, workers and memory_limit at least 0"
            )
        self.memory_limit = memory_limit
        self.max_chars = max_chars
        self.timeout = timeout
        self.workers = workers
        self._idle: list[_Worker] = []
        self._started = 0
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(workers, 1))
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"PageConverter(max_chars={self.max_chars}, timeout={self.timeout}, "
            f"workers={self.workers})"
        )

    async def html_to_page(self, html: str, url: str, title: str, *, show_url: bool) -> Page:
        """``html_to_page`` within the budgets; raises ToolError (for the model) past them."""
        if len(html) > self.max_chars:
            raise ToolError(
                f"the page is too large to show ({len(html):,} characters of HTML; "
                f"the limit is {self.max_chars:,})"
            )
        page: Page = await self.run(_convert_html, html, url, title, show_url)
        return page

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker within the time budget (``fn`` must be picklable).

        The budget counts from the call, waiting for a free worker included.
        """
        if self._closed:
            raise ToolError("the browser is closed")
        if self.workers == 0:
            try:
                return await asyncio.wait_for(asyncio.to_thread(fn, *args), self.timeout)
            except asyncio.TimeoutError:
                raise self._too_slow() from None
            except Exception as e:  # as a worker process reports it
                raise ToolError(f"the page could not be converted: {e or type(e).__name__}") from e
        job = _Job(fn, args)
        try:
            status, value = await asyncio.wait_for(
                asyncio.to_thread(self._run_job, job), self.timeout
            )
        except asyncio.TimeoutError:
            job.abandon()
            raise self._too_slow() from None
        except BaseException:
            job.abandon()  # cancelled: the worker is stopped, not left converting
            raise
        if status == "died":  # killed from outside, or out of memory
            raise ToolError("the page could not be converted (the converter stopped)")
        if status == "error":
            raise ToolError(f"the page could not be converted: {value}")
        return value

    def _run_job(self, job: _Job) -> tuple[str, Any]:
        # In a thread: wait for a free slot, then exchange with an idle or new worker.
        with self._slots:
            with job.lock:
                if job.abandoned:
                    return ("abandoned", None)
                worker = job.worker = self._take()
            try:
                reply = worker.exchange((job.fn, job.args))
            except (EOFError, OSError):
                worker.close()
                return ("died", None)
            with job.lock:
                abandoned = job.abandoned
                job.done = True
            if abandoned:
                worker.close()
                return ("abandoned", None)
            self._give_back(worker)
            return reply

    def _too_slow(self) -> ToolError:
        return ToolError(f"the page took longer than {self.timeout:g} s to convert; not shown")

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._started += 1
        return _Worker(self.memory_limit)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        worker.close()

    @property
    def processes_started(self) -> int:
        """How many worker processes were started so far (a killed one is replaced)."""
        return self._started

    async def aclose(self) -> None:
        """Stop the idle workers; later conversions are refused."""
        self.close()

    def close(self) -> None:
        """Synchronous :meth:`aclose`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()
