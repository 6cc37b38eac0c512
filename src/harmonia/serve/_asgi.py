"""The HTTP plumbing under the routes: disconnect watching, SSE writing, JSON answers.

The SSE path is plain ASGI (no middleware per chunk): one write per engine
step, a watchdog that sends keep-alive comments when the stream is quiet and
drops a client that stops reading, and cancellation of the producer (and so
of the engine generation) as soon as the client disconnects.

Frames come from an async iterator, and may also be *pushed*
(:meth:`SSEResponse.pusher`): a turn whose stream is idle writes the events the
engine's task just made straight to the socket, in that task, instead of waking
the stream's task for every token (issue 34: a task wake-up per token per
stream was a fifth of the server's CPU). A push writes at once or not at all:
while an earlier write waits for the client to read (flow control), it declines
and the frames go the iterator's way, after that write.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    MutableMapping,
)
from typing import Any, TypeVar

from starlette.responses import Response

from ..openai_compat._common import compact_json
from ._errors import APIError

T = TypeVar("T")
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_PING = b": keep-alive\n\n"

#: The request being answered: the status its metrics count (the guard sets it; an SSE
#: answer that fails after its 200 header records its error's status here).
_OUTCOME: contextvars.ContextVar[dict[str, int]] = contextvars.ContextVar("harmonia_outcome")


def track_outcome() -> dict[str, int]:
    """A fresh outcome for the request starting in this context (the guard calls it)."""
    outcome: dict[str, int] = {}
    _OUTCOME.set(outcome)
    return outcome


def stream_failed(status: int) -> None:
    """The streamed answer of this request failed after its header: count it as ``status``."""
    outcome = _OUTCOME.get(None)
    if outcome is not None:
        outcome["status"] = status


def dumps(data: Any) -> bytes:
    """Compact JSON bytes (the hot path: one call per chunk)."""
    return compact_json(data).encode()


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(data), status_code=status, headers=headers, media_type="application/json")


def error_response(error: APIError) -> Response:
    return Response(
        error.json_bytes(),
        status_code=error.status,
        headers=error.headers,
        media_type="application/json",
    )


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


class Disconnect:
    """Watches one request's ASGI ``receive`` for ``http.disconnect`` (after the body)."""

    def __init__(self, receive: Receive) -> None:
        self.event = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(_watch(receive, self.event))

    def close(self) -> None:
        self._task.cancel()

    async def race(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine``; cancel it and raise :class:`ClientGone` if the client leaves."""
        if self.event.is_set():
            coroutine.close()
            raise ClientGone
        task = asyncio.ensure_future(coroutine)
        waiter = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone

    async def race_or_close(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """:meth:`race`, closing the watch when it fails (no answer will use it then)."""
        try:
            return await self.race(coroutine)
        except BaseException:
            self.close()
            raise


async def _watch(receive: Receive, event: asyncio.Event) -> None:
    # Not a method: cancelled, the task keeps its CancelledError, whose traceback holds
    # this frame; a frame holding the Disconnect, which holds the task, is a cycle that
    # left each request's state to the cyclic collector.
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            event.set()
            return


class SSEResponse(Response):
    """A ``text/event-stream`` answer from an async iterator of ready-made frames."""

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        disconnect: Disconnect,
        *,
        send_timeout_s: float,
        ping_interval_s: float,
        on_disconnect: Callable[[], None] | None = None,
        on_stalled: Callable[[], None] | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        on_open: Callable[[int], None] | None = None,
    ) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.frames = frames
        self.disconnect = disconnect
        self.send_timeout_s = send_timeout_s
        self.ping_interval_s = ping_interval_s
        self.on_disconnect = on_disconnect
        self.on_stalled = on_stalled
        self.on_close = on_close
        self.on_open = on_open
        self._last_send = time.monotonic()
        self._sending_since: float | None = None
        self._dropped = False
        self._send: Send | None = None  # the body's send, while the stream is open
        #: Told ``True`` once frames may be pushed (:meth:`pusher`), ``False`` when no more.
        self.on_streaming: Callable[[bool], None] | None = None
        self._inflight: asyncio.Future[None] | None = None  # a push waiting on flow control

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.on_open is not None:
            self.on_open(1)
        try:
            await self._answer(scope, send)
        finally:
            if self.on_open is not None:
                self.on_open(-1)

    async def _answer(self, scope: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        send = scope.get("harmonia.body_send", send)  # the hot path: no wrappers per chunk
        self._send = send
        if self.on_streaming is not None:
            self.on_streaming(True)
        stream = asyncio.ensure_future(self._stream(send))
        gone = asyncio.ensure_future(self.disconnect.event.wait())
        watchdog = asyncio.ensure_future(self._watchdog(send, stream))
        try:
            await asyncio.wait((stream, gone), return_when=asyncio.FIRST_COMPLETED)
            if gone.done() and not stream.done():
                if self.on_disconnect is not None:
                    self.on_disconnect()
                stream.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await stream
            elif stream.done() and not stream.cancelled():
                stream.result()  # re-raise a bug in the producer
        finally:
            self._send = None  # no push from now on
            if self.on_streaming is not None:
                self.on_streaming(False)
                # It holds the pusher, which holds this answer: a cycle otherwise.
                self.on_streaming = None
            for task in (stream, gone, watchdog, self._inflight):
                if task is not None:
                    task.cancel()
            with contextlib.suppress(Exception):
                await self.frames.aclose()  # type: ignore[attr-defined]
            if self.on_close is not None:
                await self.on_close()
            self.disconnect.close()
        if not self.disconnect.event.is_set() and not self._dropped:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _write(self, send: Send, data: bytes) -> None:
        # No lock between the stream's writes and the watchdog's pings: each send writes
        # its whole frame in one transport write, so two frames can never interleave.
        while self._inflight is not None:  # a push's write goes first
            await asyncio.shield(self._inflight)
        self._sending_since = self._last_send = time.monotonic()
        await send({"type": "http.response.body", "body": data, "more_body": True})
        self._sending_since = None

    def pusher(self, encode: Callable[[T], bytes]) -> Callable[[T], bool]:
        """A function that writes ``encode(events)`` now, from the caller's task.

        It returns ``False``, writing nothing, when it cannot write at once (the
        stream is not open, or an earlier write still waits for the client): the
        caller then hands the events to the frames iterator. A write that the
        server's flow control suspends finishes in a task of its own, and every
        later write waits for it.
        """

        def push(events: T) -> bool:
            send = self._send
            if send is None or self._inflight is not None:
                return False
            self._sending_since = self._last_send = time.monotonic()
            message = {"type": "http.response.body", "body": encode(events), "more_body": True}
            sending: Any = send(message)  # a coroutine, run by hand up to its first wait
            try:
                waiting = sending.send(None)
            except StopIteration:  # written: the common case
                self._sending_since = None
                return True
            except OSError:  # the socket closed: the iterator's write finds out the same way
                self._sending_since = None
                return False
            self._inflight = asyncio.ensure_future(_resume(sending, waiting))
            self._inflight.add_done_callback(self._pushed)
            return True

        return push

    def _pushed(self, _: object) -> None:
        self._inflight = None
        self._sending_since = None

    async def _stream(self, send: Send) -> None:
        try:
            async for frame in self.frames:
                await self._write(send, frame)
        except OSError:  # the socket closed under us: same as a disconnect
            return

    async def _watchdog(self, send: Send, stream: asyncio.Future[None]) -> None:
        tick = min(self.ping_interval_s, self.send_timeout_s) / 4
        while not stream.done():
            await asyncio.sleep(tick)
            now = time.monotonic()
            since = self._sending_since
            if since is not None and now - since > self.send_timeout_s:
                self._dropped = True
                if self.on_stalled is not None:
                    self.on_stalled()
                stream.cancel()  # a client that stopped reading: drop it
                return
            if since is None and now - self._last_send >= self.ping_interval_s:
                with contextlib.suppress(OSError):
                    await self._write(send, _PING)


class _Resumed:
    """The rest of a coroutine that was started by hand and is waiting on ``waiting``."""

    def __init__(self, coroutine: Any, waiting: Any) -> None:
        self.coroutine, self.waiting = coroutine, waiting

    def __await__(self) -> Generator[Any, None, None]:
        try:
            yield self.waiting  # the future it awaits: the task waits for it as it would
        except BaseException:
            self.coroutine.close()
            raise
        yield from self.coroutine.__await__()


async def _resume(coroutine: Any, waiting: Any) -> None:
    await _Resumed(coroutine, waiting)
