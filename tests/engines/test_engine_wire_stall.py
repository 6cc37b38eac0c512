"""The engine stream's stall check: one timer per answer, read against an injected clock.

``Answer._read`` no longer arms a timeout per read (at hundreds of streams that
timer was a share of the server's CPU); one timer per answer decides, each time
it fires, whether the read in flight has waited the whole read timeout. These
tests drive that decision with a fake clock, so no test waits on real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harmonia.engines._wire import Answer, Wire, WireError


class Clock:
    """A loop stand-in for the timer: its time is set by the test, timers are recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[float] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> Any:
        self.timers.append(when)
        return asyncio.get_running_loop().call_at(1e12, callback)  # never fires by itself


class Writer:
    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def answer(clock: Clock, timeout: float = 5.0) -> tuple[Answer, asyncio.StreamReader]:
    wire = Wire("http://127.0.0.1:1", connect_timeout=1.0, read_timeout=timeout, headers={})
    reader = asyncio.StreamReader()
    out = Answer(wire, reader, Writer(), 200, {}, b"", keep_alive=True)  # type: ignore[arg-type]
    out._loop = clock  # type: ignore[assignment]
    return out, reader


def test_a_read_that_waits_the_timeout_fails_as_a_stall() -> None:
    async def main() -> list[float]:
        clock = Clock()
        ans, _ = answer(clock)
        read = asyncio.ensure_future(ans._read())
        await asyncio.sleep(0)  # the read is in flight, begun at 0
        clock.now = 4.0
        ans._check()  # early (a timer set for an earlier read): not yet
        assert not read.done()
        clock.now = 5.0
        ans._check()
        with pytest.raises(WireError) as info:
            await read
        assert info.value.kind == "stall"
        return clock.timers

    # Armed once for the read's deadline, then again for the same deadline after 4 s.
    assert asyncio.run(main()) == [5.0, 5.0]


def test_reads_that_each_come_in_time_never_stall_however_long_the_stream() -> None:
    async def main() -> list[float]:
        clock = Clock()
        ans, reader = answer(clock)
        for second in range(0, 40, 4):  # a read every 4 s for 40 s, the timeout 5 s
            clock.now = float(second)
            read = asyncio.ensure_future(ans._read())
            await asyncio.sleep(0)
            if second:
                ans._check()  # the timer fires while this read waits
            reader.feed_data(b"x")
            assert await read == b"x"
        return clock.timers

    timers = asyncio.run(main())
    # One timer at a time, each set for the deadline of the read then in flight.
    assert timers == [5.0, *(second + 5.0 for second in range(4, 40, 4))]


def test_between_reads_the_timer_waits_a_whole_timeout_and_stops_at_the_end() -> None:
    async def main() -> tuple[list[float], bool]:
        clock = Clock()
        ans, reader = answer(clock)
        read = asyncio.ensure_future(ans._read())
        await asyncio.sleep(0)
        reader.feed_data(b"x")
        await read
        clock.now = 7.0
        ans._check()  # no read in flight: nothing to fail, look again a timeout later
        ans.close()
        return clock.timers, ans._timer is None

    timers, stopped = asyncio.run(main())
    assert timers == [5.0, 12.0] and stopped


def test_a_reader_failed_by_the_check_is_not_pooled() -> None:
    async def main() -> int:
        clock = Clock()
        ans, reader = answer(clock)
        read = asyncio.ensure_future(ans._read())
        await asyncio.sleep(0)
        reader.feed_data(b"x")  # the data came, but the timer fires before the read resumes
        clock.now = 5.0
        ans._check()
        assert await read == b"x"
        ans._done = True  # its body was read to the end
        ans.close()
        return len(ans._wire._idle)

    assert asyncio.run(main()) == 0
