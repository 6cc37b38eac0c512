"""The engine stream's timers, read against an injected clock: the stall check and the tail.

No timeout is armed per read (at hundreds of streams that timer was a share of
the server's CPU); one timer per answer decides, each time it fires, whether
the last data came a whole read timeout ago. An answer stopped at the engine's
last event is kept until the rest of its body comes, for at most
``TIMEOUTS.engine_tail``, then pooled. These tests feed the body through the
connection's protocol and drive the timers with a fake clock, so no test waits
on real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harmonia._runtime import TIMEOUTS
from harmonia.engines._wire import _TAIL_LIMIT, Answer, Wire, WireError


class Clock:
    """A loop stand-in for the timer: its time is set by the test, timers are recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[float] = []
        self.callbacks: list[Any] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> Any:
        self.timers.append(when)
        self.callbacks.append(callback)  # a test fires one by calling it
        return asyncio.get_running_loop().call_at(1e12, callback)  # never fires by itself


class Transport:
    def __init__(self) -> None:
        self.protocol: Any = None
        self.closed = False

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return self.closed


class Writer:
    def __init__(self) -> None:
        self.transport = Transport()

    def is_closing(self) -> bool:
        return self.transport.closed

    def close(self) -> None:
        self.transport.closed = True


def answer(clock: Clock, timeout: float = 5.0) -> tuple[Answer, Writer]:
    wire = Wire("http://127.0.0.1:1", connect_timeout=1.0, read_timeout=timeout, headers={})
    writer = Writer()
    headers = {"transfer-encoding": "chunked"}
    out = Answer(wire, asyncio.StreamReader(), writer, 200, headers, b"", keep_alive=True)  # type: ignore[arg-type]
    out._loop = clock  # type: ignore[assignment]
    return out, writer


def test_a_body_with_no_data_for_the_timeout_fails_as_a_stall() -> None:
    async def main() -> list[float]:
        clock = Clock()
        ans, _ = answer(clock)
        body = asyncio.ensure_future(ans.follow(lambda piece: False))
        await asyncio.sleep(0)  # following, begun at 0
        clock.now = 4.0
        ans._check()  # early: not yet
        assert not body.done()
        clock.now = 5.0
        ans._check()
        with pytest.raises(WireError) as info:
            await body
        assert info.value.kind == "stall"
        return clock.timers

    # Armed once for the deadline, then again for the same deadline after 4 s.
    assert asyncio.run(main()) == [5.0, 5.0]


def test_data_that_comes_in_time_never_stalls_however_long_the_stream() -> None:
    async def main() -> tuple[list[float], bytes, int]:
        clock = Clock()
        ans, writer = answer(clock)
        got: list[bytes] = []
        body = asyncio.ensure_future(ans.follow(lambda piece: got.append(piece) is not None))
        await asyncio.sleep(0)
        for second in range(4, 40, 4):  # data every 4 s for 40 s, the timeout 5 s
            clock.now = float(second)
            ans._check()  # the timer fires: the last data came 4 s ago
            writer.transport.protocol.data_received(b"1\r\nx\r\n")
        writer.transport.protocol.data_received(b"0\r\n\r\n")
        await body
        ans.close()
        return clock.timers, b"".join(got), len(ans._wire._idle)

    timers, body, pooled = asyncio.run(main())
    # One timer at a time, each set for the deadline of the data before it fired.
    assert timers == [5.0, *(second + 1.0 for second in range(4, 40, 4))]
    assert body == b"x" * 9
    assert pooled == 1  # read to its end: reused


def test_a_stalled_body_is_not_pooled_and_stops_its_timer() -> None:
    async def main() -> tuple[int, bool]:
        clock = Clock()
        ans, writer = answer(clock)
        body = asyncio.ensure_future(ans.follow(lambda piece: False))
        await asyncio.sleep(0)
        writer.transport.protocol.data_received(b"1\r\nx\r\n")
        clock.now = 5.0
        ans._check()
        with pytest.raises(WireError):
            await body
        ans.close()
        return len(ans._wire._idle), ans._timer is None

    assert asyncio.run(main()) == (0, True)


async def _stopped(clock: Clock) -> tuple[Answer, Writer]:
    """An answer whose sink stopped at its first piece: the rest of the body still to come."""
    ans, writer = answer(clock)
    body = asyncio.ensure_future(ans.follow(lambda piece: True))
    await asyncio.sleep(0)
    writer.transport.protocol.data_received(b"1\r\nx\r\n")
    await body
    assert not ans.ended
    return ans, writer


def test_a_drained_answer_is_pooled_once_its_tail_has_come() -> None:
    async def main() -> tuple[list[int], list[float], bool]:
        clock = Clock()
        ans, writer = await _stopped(clock)
        clock.now = 2.0
        ans.close(drain=True)
        pooled = [len(ans._wire._idle)]
        writer.transport.protocol.data_received(b"e\r\ndata: [DONE]\n\n\r\n")
        pooled.append(len(ans._wire._idle))
        writer.transport.protocol.data_received(b"0\r\n\r\n")
        pooled.append(len(ans._wire._idle))
        return pooled, clock.timers, writer.is_closing() or bool(ans._wire.draining)

    pooled, timers, closed_or_draining = asyncio.run(main())
    assert pooled == [0, 0, 1]  # kept, not yet reusable, then back in the pool
    assert timers[-1] == 2.0 + TIMEOUTS.engine_tail  # the tail's bound, from the close
    assert not closed_or_draining


def test_a_tail_that_does_not_end_in_time_closes_the_connection() -> None:
    async def main() -> tuple[int, bool, bool]:
        clock = Clock()
        ans, writer = await _stopped(clock)
        ans.close(drain=True)
        writer.transport.protocol.data_received(b"1\r\ny\r\n")  # more, but no end
        clock.callbacks[-1]()  # the tail's timer fires
        writer.transport.protocol.data_received(b"0\r\n\r\n")  # too late: ignored
        return len(ans._wire._idle), writer.is_closing(), bool(ans._wire.draining)

    assert asyncio.run(main()) == (0, True, False)


def test_a_tail_longer_than_the_limit_closes_the_connection() -> None:
    async def main() -> tuple[int, bool, bool]:
        clock = Clock()
        ans, writer = await _stopped(clock)
        ans.close(drain=True)
        payload = b"z" * (_TAIL_LIMIT + 1)  # an engine that still generates
        writer.transport.protocol.data_received(b"%x\r\n%s\r\n" % (len(payload), payload))
        return len(ans._wire._idle), writer.is_closing(), bool(ans._wire.draining)

    assert asyncio.run(main()) == (0, True, False)


def test_without_drain_a_stopped_answer_is_closed_at_once() -> None:
    async def main() -> tuple[int, bool]:
        clock = Clock()
        ans, writer = await _stopped(clock)
        ans.close()  # the client left, or the engine still generates: it must see the close
        return len(ans._wire._idle), writer.is_closing()

    assert asyncio.run(main()) == (0, True)


def test_closing_the_wire_closes_a_connection_being_drained() -> None:
    async def main() -> tuple[bool, int]:
        clock = Clock()
        ans, writer = await _stopped(clock)
        ans.close(drain=True)
        ans._wire.close()
        closed = writer.is_closing()  # at once, not when the tail comes
        writer.transport.protocol.data_received(b"0\r\n\r\n")  # the end, after the close
        return closed, len(ans._wire._idle)

    assert asyncio.run(main()) == (True, 0)


def test_a_sink_that_raises_on_the_last_bytes_leaves_a_reusable_connection() -> None:
    """The generation's stop id raises out of the sink; the same read held the body's end."""

    def stop(piece: bytes) -> bool:
        raise ValueError("the stop id")

    async def main() -> tuple[int, bool]:
        clock = Clock()
        ans, writer = answer(clock)
        body = asyncio.ensure_future(ans.follow(stop))
        await asyncio.sleep(0)
        writer.transport.protocol.data_received(b"1\r\nx\r\n0\r\n\r\n")
        with pytest.raises(ValueError):
            await body
        ans.close()
        return len(ans._wire._idle), writer.is_closing()

    assert asyncio.run(main()) == (1, False)
