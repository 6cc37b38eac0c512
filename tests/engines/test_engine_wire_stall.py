"""The engine stream's stall check: one timer per answer, read against an injected clock.

No timeout is armed per read (at hundreds of streams that timer was a share of
the server's CPU); one timer per answer decides, each time it fires, whether
the last data came a whole read timeout ago. These tests feed the body through
the connection's protocol and drive that decision with a fake clock, so no
test waits on real time.
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
