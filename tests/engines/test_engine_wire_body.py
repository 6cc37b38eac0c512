"""The answer body's framing, undone a piece at a time (``_wire._Body``), and
``Answer.follow`` against a real socket: the pieces reach the sink in order,
however the bytes are split, and a broken body is a ``WireError``."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harmonia.engines._wire import Wire, WireError, _Body, decode_all


def chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 10_000])
def test_a_chunked_body_split_anywhere_gives_the_same_bytes(step: int) -> None:
    payloads = [b'data: {"a": 1}\n\n', b"x" * 300, b"data: [DONE]\n\n"]
    wire = chunked(*payloads)
    body = _Body({"transfer-encoding": "chunked"})
    out = b"".join(body.feed(wire[i : i + step]) for i in range(0, len(wire), step))
    assert out == b"".join(payloads)
    assert body.ended


@given(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=6),
    st.lists(st.booleans(), max_size=12),
)
def test_chunk_by_chunk_reads_and_any_other_split_give_the_same_bytes(
    payloads: list[bytes], whole: list[bool]
) -> None:
    # A read of one whole chunk is sliced out on its own (the streamed token's read);
    # mixed with split and merged reads the body must come out the same.
    pieces = [b"%x\r\n%s\r\n" % (len(p), p) for p in payloads] + [b"0\r\n\r\n"]
    reads: list[bytes] = []
    for position, piece in enumerate(pieces):
        if position < len(whole) and not whole[position]:
            reads += [piece[:3], piece[3:]]  # split inside the chunk
        elif reads and position % 3 == 2:
            reads[-1] += piece  # merged with the read before
        else:
            reads.append(piece)
    body = _Body({"transfer-encoding": "chunked"})
    assert b"".join(body.feed(read) for read in reads) == b"".join(payloads)
    assert body.ended


def test_a_chunk_extension_and_a_trailer_are_skipped() -> None:
    body = _Body({"transfer-encoding": "chunked"})
    out = body.feed(b"3;name=value\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert out == b"abc" and body.ended


@pytest.mark.parametrize("size", [b"zz", b"-1"])
def test_a_bad_chunk_size_is_a_protocol_error(size: bytes) -> None:
    with pytest.raises(WireError) as info:
        _Body({"transfer-encoding": "chunked"}).feed(size + b"\r\nabc\r\n")
    assert info.value.kind == "protocol"


def test_content_length_stops_at_its_length_and_close_reads_to_the_end() -> None:
    body = _Body({"content-length": "5"})
    assert body.feed(b"abc") == b"abc" and not body.ended
    assert body.feed(b"defgh") == b"de" and body.ended
    assert _Body({"content-length": "0"}).ended
    until_close = _Body({})
    assert until_close.feed(b"anything") == b"anything"
    until_close.closed()
    assert until_close.ended


@pytest.mark.parametrize("headers", [{"transfer-encoding": "chunked"}, {"content-length": "9"}])
def test_a_close_before_the_end_is_broken(headers: dict[str, str]) -> None:
    body = _Body(headers)
    body.feed(b"4\r\nab" if "transfer-encoding" in headers else b"ab")
    with pytest.raises(WireError) as info:
        body.closed()
    assert info.value.kind == "broken"


async def _serve(answer: bytes, *, then_close: bool) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for position in range(0, len(answer), 5):  # in small pieces: many reads
            writer.write(answer[position : position + 5])
            await writer.drain()
            await asyncio.sleep(0)
        if then_close:
            writer.close()
        else:
            await reader.read()  # keep the connection open until the client closes it

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_follow_hands_every_piece_in_order_and_pools_the_connection() -> None:
    payloads = [b"one ", b"two ", b"three"]
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def main() -> tuple[bytes, int]:
        server, port = await _serve(head + chunked(*payloads), then_close=False)
        wire = Wire(f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5, headers={})
        got: list[bytes] = []
        try:
            answer = await wire.request("POST", "/x", {"a": 1})
            await answer.follow(lambda piece: got.append(piece) is not None)
            assert answer.ended
            answer.close()
            return b"".join(got), len(wire._idle)
        finally:
            wire.close()
            server.close()

    body, pooled = asyncio.run(main())
    assert body == b"".join(payloads)
    assert pooled == 1  # read to its end: the connection goes back to the pool


def test_follow_stops_when_the_sink_says_so_and_raises_what_it_raised() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer_bytes = head + chunked(*[b"piece %d " % n for n in range(20)])

    async def main() -> tuple[int, str, int]:
        server, port = await _serve(answer_bytes, then_close=False)
        wire = Wire(f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5, headers={})
        try:
            stopped = await wire.request("POST", "/x")
            seen: list[bytes] = []

            def sink(piece: bytes) -> bool:
                seen.append(piece)
                return True  # enough

            await stopped.follow(sink)
            stopped.close()  # not at its end: closed, not pooled
            failing = await wire.request("POST", "/x")

            def bad(piece: bytes) -> bool:
                raise ValueError("the sink refused")

            with pytest.raises(ValueError) as info:
                await failing.follow(bad)
            failing.close()
            return len(seen), str(info.value), len(wire._idle)
        finally:
            wire.close()
            server.close()

    seen, message, pooled = asyncio.run(main())
    assert seen == 1 and message == "the sink refused" and pooled == 0


def test_follow_fails_as_broken_when_the_server_closes_mid_body() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def main() -> WireError:
        server, port = await _serve(head + b"5\r\nhel", then_close=True)
        wire = Wire(f"http://127.0.0.1:{port}", connect_timeout=5, read_timeout=5, headers={})
        try:
            answer = await wire.request("POST", "/x")
            with pytest.raises(WireError) as info:
                await answer.follow(lambda piece: False)
            answer.close()
            return info.value
        finally:
            wire.close()
            server.close()

    error = asyncio.run(main())
    assert error.kind == "broken" and "mid-stream" in str(error)


class _Transport:
    """What ``follow`` uses of a transport; records the reading pauses."""

    def __init__(self) -> None:
        self.protocol: object = "the stream reader's"
        self.calls: list[str] = []

    def get_protocol(self) -> object:
        return self.protocol

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return False


class _Writer:
    def __init__(self) -> None:
        self.transport = _Transport()

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_large_read_yields_to_the_event_loop_before_the_next() -> None:
    from harmonia.engines._wire import _BACKLOG, Answer

    async def main() -> tuple[list[str], list[str], object]:
        wire = Wire("http://127.0.0.1:1", connect_timeout=1, read_timeout=60, headers={})
        writer = _Writer()
        answer = Answer(
            wire,
            asyncio.StreamReader(),
            writer,
            200,
            {},
            b"",
            keep_alive=False,  # type: ignore[arg-type]
        )
        following = asyncio.ensure_future(answer.follow(lambda piece: False))
        await asyncio.sleep(0)
        taker = writer.transport.protocol
        taker.data_received(b"small")  # type: ignore[attr-defined]
        small = list(writer.transport.calls)
        taker.data_received(b"x" * _BACKLOG)  # type: ignore[attr-defined]
        during = list(writer.transport.calls)
        await asyncio.sleep(0)  # the next turn of the loop reads again
        taker.connection_lost(None)  # type: ignore[attr-defined]
        await following
        return small, during + writer.transport.calls[len(during) :], writer.transport.protocol

    small, calls, restored = asyncio.run(main())
    assert small == []  # a small read: nothing paused
    assert calls == ["pause", "resume"]
    assert restored == "the stream reader's"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(_JSON, st.sampled_from(["", " ", "\n", "\ufeff"]), st.sampled_from(["", " ", "x", ",1"]))
def test_one_payload_decodes_as_json_loads_would(value: object, before: str, after: str) -> None:
    # One event per read is the common case and skips json.loads's own steps: what it
    # reads must be what json.loads reads, and what json.loads refuses is refused.
    raw = (before + json.dumps(value, ensure_ascii=False) + after).encode()
    try:
        expected: list[object] | None = [json.loads(raw)]
    except ValueError:
        expected = None
    assert decode_all([raw]) == expected
