"""The engine stream's hot path: HTTP/1.1 over asyncio streams, SSE split a read at a time.

An engine server writes one SSE event per sampled token per sequence (vLLM:
one HTTP chunk each). Read through a general HTTP client, every event costs a
parser event, a line iterator step, a decoder call and a ``json.loads``: at
hundreds of streams that was most of ``harmonia serve``'s CPU (issue 34). Here
each socket read (every event that has arrived) is de-chunked, split into SSE
events and JSON-decoded in one ``json.loads`` of all its payloads, and handed
on as one batch, in the connection's own callback (:meth:`Answer.follow`): the
batch reaches the engine, the parser and the client's socket without a task
waking up.

Only what the engines use is spoken: a request with a JSON (or empty) body,
an answer with ``Content-Length``, chunked, or up to the close; keep-alive
connections are pooled per host. Errors are :class:`WireError` with the words
the caller puts in its :class:`~harmonia.EngineError`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit

from harmonia._runtime import TIMEOUTS

#: Bytes asked of the socket per read of an answer's head.
READ_SIZE: Final = 256 * 1024
#: Idle connections kept per engine server.
_POOL_SIZE: Final = 256
_HEAD_LIMIT: Final = 64 * 1024
#: A read this large means data is waiting: :meth:`Answer.follow` yields to the event loop.
_BACKLOG: Final = 32 * 1024
#: The most bytes of an answer's tail read to keep its connection (:meth:`Answer.close`).
_TAIL_LIMIT: Final = 64 * 1024


if sys.version_info >= (3, 11):

    async def _read_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
        """One read of at most :data:`READ_SIZE` bytes; TimeoutError after ``seconds``."""
        async with asyncio.timeout(seconds):  # a timer, not a task per read as wait_for
            return await reader.read(READ_SIZE)

else:  # pragma: no cover - Python 3.10

    async def _read_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
        return await asyncio.wait_for(reader.read(READ_SIZE), seconds)


class WireError(Exception):
    """A transport failure: ``kind`` is ``connect``, ``connect_timeout``, ``stall``,
    ``broken`` or ``protocol``; the message says what happened."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Answer:
    """An answer's status and headers; its body is read with :meth:`body` or :meth:`follow`."""

    def __init__(
        self,
        wire: Wire,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        rest: bytes,
        keep_alive: bool,
    ) -> None:
        self.status = status
        self.headers = headers
        self._wire, self._reader, self._writer = wire, reader, writer
        self._rest = rest
        self._keep_alive = keep_alive
        self._done = False
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None  # the stall check (see _check)
        self._since = 0.0  # when the last data came
        self._following: asyncio.Future[None] | None = None  # see follow()
        self._body: _Body | None = None  # the body follow() reads

    def _check(self) -> None:
        """The stall check: fail the body when no data came for the read timeout.

        Not a timeout per read: at hundreds of streams a timer made and
        cancelled per read was a measurable share of the server's CPU (issue
        34). One timer per answer checks, when it fires, whether the last data
        came ``read_timeout`` ago; if so the body fails with ``stall``, else the
        timer is set again for the deadline of the last data.
        """
        following = self._following
        if following is None or following.done() or self._writer.is_closing():
            self._timer = None
            return
        deadline = self._since + self._wire.read_timeout
        if self._loop.time() >= deadline:
            self._timer = None
            following.set_exception(WireError("stall", "no data"))
            return
        self._timer = self._loop.call_at(deadline, self._check)

    @property
    def ended(self) -> bool:
        """Whether the body was read to its end."""
        return self._done

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def follow(self, sink: Callable[[bytes], bool]) -> None:
        """Hand the body to ``sink`` as the socket brings it, until its end or until
        ``sink`` returns ``True``; raises :class:`WireError` or what ``sink`` raised.

        ``sink`` runs in the transport's own callback (the connection's protocol
        is this answer's while it is read): no task wakes up and no buffer fills
        per read, which at hundreds of streams was a large share of the server's
        CPU (issue 34). No data for the wire's read timeout fails it as ``stall``
        (:meth:`_check`).
        """
        body = self._body = _Body(self.headers)
        self._keep_alive = self._keep_alive and body.kind != "close"
        loop = self._loop
        running = asyncio.get_running_loop()
        transport = cast(asyncio.Transport, self._writer.transport)
        done: asyncio.Future[None] = running.create_future()
        self._following = done
        # What the sink raised, raised again from here: kept out of ``done``, whose
        # exception's traceback would hold ``take``'s frame, which holds ``done`` (a
        # cycle that left each request's state to the cyclic collector).
        raised: list[Exception] = []

        def take(data: bytes) -> None:
            if done.done():  # bytes after a stop: the rest of the body, for close() to drain
                self._feed_tail(data)
                return
            self._since = loop.time()
            if len(data) >= _BACKLOG:
                # A backlog (an engine faster than we read): one read per turn of the event
                # loop, so that the other requests are served in between.
                transport.pause_reading()
                running.call_soon(_resume_reading, transport)
            try:
                piece = body.feed(data)
            except WireError as exc:
                self._keep_alive = False
                done.set_exception(exc)
                return
            try:
                stop = bool(piece) and sink(piece)
            except Exception as exc:
                # A sink that raises to stop (the generation's stop id) may have been
                # handed the body's last bytes: then the connection is reusable.
                self._done = body.ended
                raised.append(exc)
                done.set_result(None)
                return
            if body.ended:
                self._done = True
            if stop or body.ended:
                done.set_result(None)

        def lost(exc: BaseException | None) -> None:
            if done.done():
                return
            if exc is not None:
                done.set_exception(WireError("broken", str(exc) or type(exc).__name__))
                return
            try:
                body.closed()
            except WireError as error:
                done.set_exception(error)
                return
            self._done = True
            done.set_result(None)

        previous = transport.get_protocol()
        # What the stream reader holds already (read with the head) comes first.
        held = getattr(self._reader, "_buffer", None)
        data, self._rest = self._rest + (bytes(held) if held else b""), b""
        if held:
            held.clear()
        transport.set_protocol(_Taker(take, lost))
        self._since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._since + self._wire.read_timeout, self._check)
        try:
            take(data)
            await done
            if raised:
                raise raised.pop()
        finally:
            self._following = None
            if not transport.is_closing():
                transport.set_protocol(previous)
            if self._done:
                self._stop_timer()

    async def body(self, limit: int = 1 << 20) -> bytes:
        """The whole body (at most ``limit`` bytes kept)."""
        out = bytearray()

        def keep(piece: bytes) -> bool:
            if len(out) < limit:
                out.extend(piece)
            return False

        await self.follow(keep)
        return bytes(out[:limit])

    def _feed_tail(self, data: bytes) -> bool:
        """Bytes after :meth:`follow` stopped: whether the body has ended with them."""
        body = self._body
        if body is None or body.ended or body.kind == "close" or not self._keep_alive:
            self._keep_alive = False  # bytes after the end, or a body that ends at the close
            return False
        try:
            body.feed(data)
        except WireError:
            self._keep_alive = False
            return False
        self._done = body.ended
        return body.ended

    def close(self, *, drain: bool = False) -> None:
        """Give the connection back when the body was read to its end, else close it.

        ``drain``: the engine has sent its last event, and only the end of its
        answer (``data: [DONE]``, the last chunk) is still on its way. Then the
        connection is kept, in the background, until that end comes (at most
        :data:`_TAIL_LIMIT` bytes within ``TIMEOUTS.engine_tail``) and given
        back to the pool: a streamed request then costs no new connection, on
        either side. Without ``drain`` (the client left, the stream went wrong,
        the engine still generates) it is closed at once, which is how the
        engine learns to stop.
        """
        self._stop_timer()
        writer = self._writer
        if self._done and self._keep_alive and not writer.is_closing():
            self._wire.give_back(self._reader, writer)
        elif drain and self._body is not None and self._keep_alive and not writer.is_closing():
            self._drain()
        else:
            writer.close()

    def _drain(self) -> None:
        transport = cast(asyncio.Transport, self._writer.transport)
        previous = transport.get_protocol()
        budget = _TAIL_LIMIT
        timer: asyncio.TimerHandle | None = None
        self._wire.draining.add(self._writer)

        def end(reusable: bool) -> None:
            if self._writer not in self._wire.draining:
                return  # ended already
            self._wire.draining.discard(self._writer)
            if timer is not None:
                timer.cancel()
            if reusable and not transport.is_closing():
                transport.set_protocol(previous)
                self._wire.give_back(self._reader, self._writer)
            else:
                self._writer.close()

        def take(data: bytes) -> None:
            nonlocal budget
            budget -= len(data)
            if budget < 0:
                end(False)
            elif self._feed_tail(data):
                end(True)
            elif not self._keep_alive:
                end(False)

        # What the stream reader holds already (it came after follow() stopped) comes first.
        held = getattr(self._reader, "_buffer", None)
        if held:
            data = bytes(held)
            held.clear()
            take(data)
            if self._writer not in self._wire.draining:
                return
        transport.set_protocol(_Taker(take, lambda exc: end(False)))
        timer = self._loop.call_at(self._loop.time() + TIMEOUTS.engine_tail, lambda: end(False))


class _Body:
    """An answer body's framing undone a piece at a time: chunked, ``Content-Length``,
    or up to the close (``kind``); :attr:`ended` once its last byte came."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.ended = False
        if headers.get("transfer-encoding", "").lower().endswith("chunked"):
            self.kind = "chunked"
        elif "content-length" in headers:
            self.kind = "length"
            self._left = int(headers["content-length"])
            self.ended = self._left <= 0
        else:
            self.kind = "close"
        self._data = bytearray()
        self._need: int | None = None  # payload bytes of the current chunk still to come
        self._skip = 0  # bytes of the CRLF after a chunk still to skip
        self._last = False  # the zero-size chunk came: only the blank trailer line is left

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data``, the next bytes off the wire."""
        if self.ended or not data:
            return b""
        if self.kind == "chunked":
            if not self._data and self._need is None and not self._skip and not self._last:
                # The common read, one whole chunk, is sliced out without the buffer (a
                # read per streamed token); anything else takes the general way.
                end = data.find(b"\r\n")
                try:
                    need = int(data[:end], 16) if end > 0 else 0
                except ValueError:
                    need = 0
                if need > 0 and len(data) == end + need + 4 and data.endswith(b"\r\n"):
                    return data[end + 2 : end + 2 + need]
            return self._dechunk(data)
        if self.kind == "close":
            return data
        piece = data[: self._left]
        self._left -= len(piece)
        self.ended = self._left <= 0
        return piece

    def closed(self) -> None:
        """The server closed the connection: the end of the body, or a broken one."""
        if self.kind == "close":
            self.ended = True
        elif not self.ended:
            where = " mid-stream" if self.kind == "chunked" else ""
            raise WireError("broken", f"the server closed the connection{where}")

    def _dechunk(self, more: bytes) -> bytes:
        data = self._data
        data += more
        position = 0
        out = bytearray()
        while True:
            if self._skip:
                taken = min(self._skip, len(data) - position)
                position += taken
                self._skip -= taken
                if self._skip:
                    break
            if self._last:
                end = data.find(b"\r\n", position)
                if end < 0:
                    break
                if end == position:  # the blank line that ends the body
                    self.ended = True
                    break
                position = end + 2  # a trailer: skipped
                continue
            if self._need is None:
                end = data.find(b"\r\n", position)
                if end < 0:
                    break
                size_text = bytes(data[position:end]).split(b";", 1)[0].strip()
                try:
                    need = int(size_text, 16)
                except ValueError:
                    need = -1
                if need < 0:
                    raise WireError("protocol", f"bad chunk size {size_text!r}")
                self._need = need
                position = end + 2
                if self._need == 0:
                    self._last = True
                    continue
            taken = min(self._need, len(data) - position)
            out += data[position : position + taken]
            position += taken
            self._need -= taken
            if self._need:
                break
            self._need, self._skip = None, 2
        del data[:position]
        return bytes(out)


def _resume_reading(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.resume_reading()


class _Taker(asyncio.Protocol):
    """A connection's protocol while :meth:`Answer.follow` reads its body."""

    def __init__(
        self, take: Callable[[bytes], None], lost: Callable[[BaseException | None], None]
    ) -> None:
        self._lost = lost
        # ``take`` itself, not a method that calls it: the loop looks the handler up
        # when the protocol is set, and a read is one call less (one per streamed token).
        self.data_received = take  # type: ignore[method-assign,assignment]

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)


class Wire:
    """Pooled HTTP/1.1 connections to one server (``base_url``)."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float,
        read_timeout: float,
        headers: Mapping[str, str],
    ) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        host = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
        self._headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        #: Connections whose answer's tail is still being read (:meth:`Answer.close`).
        self.draining: set[asyncio.StreamWriter] = set()
        self._closed = False
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.tls else None

    def give_back(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._closed and len(self._idle) < _POOL_SIZE:
            self._idle.append((reader, writer))
        else:
            writer.close()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=READ_SIZE),
                self.connect_timeout,
            )
        except asyncio.TimeoutError:
            raise WireError("connect_timeout", "no connection") from None
        except OSError as exc:
            raise WireError("connect", str(exc) or type(exc).__name__) from None

    async def request(self, method: str, path: str, body: Any = None) -> Answer:
        """Send ``method path`` (``body`` as JSON) and read the answer's head."""
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + self._headers
            + (b"Content-Type: application/json\r\n" if body is not None else b"")
            + b"Content-Length: %d\r\n\r\n" % len(data)
        )
        while self._idle:  # a pooled connection the server may have closed meanwhile
            reader, writer = self._idle.pop()
            if writer.is_closing() or reader.at_eof():
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, head + data)
            except WireError as exc:
                if exc.kind != "broken":  # closed before answering: safe to send again
                    raise
        reader, writer = await self._connect()
        return await self._exchange(reader, writer, head + data)

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: bytes,
    ) -> Answer:
        try:
            writer.write(request)
            await writer.drain()
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                try:
                    more = await _read_within(reader, self.read_timeout)
                except asyncio.TimeoutError:
                    raise WireError("stall", "no answer") from None
                if not more:
                    raise WireError("broken", "the server closed the connection")
                buffer += more
                if len(buffer) > _HEAD_LIMIT:
                    raise WireError("protocol", "an answer head over 64 KiB")
        except OSError as exc:
            writer.close()
            raise WireError("broken", str(exc) or type(exc).__name__) from None
        except BaseException:
            writer.close()
            raise
        head, _, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            version, status_text = lines[0].split(" ", 2)[:2]
            status = int(status_text)
        except ValueError:
            writer.close()
            raise WireError("protocol", f"not an HTTP answer: {lines[0][:100]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        keep_alive = version == "HTTP/1.1" and connection != "close"
        return Answer(self, reader, writer, status, headers, rest, keep_alive)

    def close(self) -> None:
        self._closed = True
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
        for writer in self.draining:
            writer.close()
        self.draining.clear()


_scan: Final = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]


class Events:
    """Splits an SSE byte stream into events, every complete event of a piece at once."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, piece: bytes) -> list[tuple[str, bytes]]:
        """``(event, data)`` of each event ``piece`` completes (comments skipped).

        llama-server's ``error: {...}`` lines come as ``("error", payload)``.
        """
        data = self._tail + piece
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        blocks = data.split(b"\n\n")
        self._tail = blocks.pop()
        out: list[tuple[str, bytes]] = []
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:  # the common case
                out.append(("message", block[6:]))
            elif block:
                out.extend(_parse_block(block))
        return out

    def rest(self) -> list[tuple[str, bytes]]:
        """The last event, when the stream ended without its blank line."""
        tail, self._tail = self._tail.strip(b"\n"), b""
        return _parse_block(tail) if tail else []


def _parse_block(block: bytes) -> list[tuple[str, bytes]]:
    event = "message"
    data: list[bytes] = []
    out: list[tuple[str, bytes]] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"error":
            out.append(("error", value))
    if data:
        out.append((event, b"\n".join(data)))
    return out


def decode_all(payloads: list[bytes]) -> list[Any] | None:
    """Every payload JSON-decoded in one call; ``None`` when one is not JSON."""
    if len(payloads) == 1:
        # The decoder's C scanner straight away (``json.loads`` adds three Python calls
        # around it, per streamed token); anything it does not read whole, such as
        # surrounding whitespace, takes ``json.loads``'s way.
        try:
            text = payloads[0].decode()
            value, end = _scan(text, 0)
            if end == len(text):
                return [value]
        except (StopIteration, ValueError):
            pass
        try:
            return [json.loads(payloads[0])]
        except ValueError:
            return None
    try:
        decoded = json.loads(b"[" + b",".join(payloads) + b"]")
    except ValueError:
        return None
    # A payload such as ``1,2`` would split in two: the count says whether it did.
    return decoded if isinstance(decoded, list) and len(decoded) == len(payloads) else None
