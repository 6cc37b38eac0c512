"""The content decoder on its own: a made-up token table, no parser, no encoding."""

from __future__ import annotations

import pytest

from harmonia import ContentDelta, Diagnostic, RecoveryKind
from harmonia._parse.content import ContentDecoder
from harmonia._parse.events import Output

HEART = "💖".encode()  # F0 9F 92 96
TABLE = [
    b"Hi",  # 0
    b" " + HEART[:2],  # 1: a space and the first half of a character
    HEART[2:],  # 2: its second half
    b"\xff",  # 3: never UTF-8
    HEART[:3],  # 4: three bytes of four
    "é".encode(),  # 5
    b"\xe2\x82",  # 6: two bytes of the three of "€"
    b"\xac!",  # 7: the last byte of "€", then "!"
]


def decoder(strict: bool) -> tuple[ContentDecoder, Output]:
    out = Output()
    return ContentDecoder(TABLE, strict=strict, out=out), out


def feed(d: ContentDecoder, out: Output, tokens: list[int]) -> list[str | None]:
    deltas = []
    for t in tokens:
        out.tokens.append(t)  # the parser appends the token before decoding it
        deltas.append(d.add(t))
    return deltas


@pytest.mark.parametrize("strict", [True, False])
def test_character_split_across_tokens(strict: bool) -> None:
    d, out = decoder(strict)
    assert feed(d, out, [0, 1, 2]) == ["Hi", " ", "💖"]
    assert d.text() == "Hi 💖" and d.delta == "💖"
    assert d.pieces == ["Hi", " ", "💖"]
    assert out.diagnostics == [] and d.flush(3) == ""


@pytest.mark.parametrize("strict", [True, False])
def test_character_split_over_three_tokens(strict: bool) -> None:
    d, out = decoder(strict)
    assert feed(d, out, [6, 7]) == [None, "€!"]
    assert d.pending == b"" and d.text() == "€!"


@pytest.mark.parametrize("strict", [True, False])
def test_no_delta_for_half_a_character(strict: bool) -> None:
    d, out = decoder(strict)
    assert feed(d, out, [4]) == [None]
    assert d.delta is None and d.pending == HEART[:3] and d.text() == ""


def test_invalid_bytes_lenient() -> None:
    d, out = decoder(False)
    assert feed(d, out, [0, 3, 5]) == ["Hi", "\ufffd", "é"]
    (diag,) = out.diagnostics
    assert diag.kind is RecoveryKind.INVALID_UTF8
    assert (diag.token_index, diag.kept, diag.tokens) == (1, "\ufffd", (3,))


def test_invalid_bytes_strict_hold_the_rest_back_like_the_reference() -> None:
    # The reference's step: the valid prefix and one U+FFFD; bytes after the bad
    # one wait for the next token, and the text still holds everything.
    d, out = decoder(True)
    assert feed(d, out, [1, 3, 0]) == [" ", "\ufffd", "\ufffd"]
    assert d.text() == " \ufffd\ufffd" and d.pending == b"Hi"
    assert d.flush(3) == "Hi"
    assert [x.kind for x in out.diagnostics] == [RecoveryKind.INVALID_UTF8] * 3
    # Lenient mode decodes everything at once.
    d, out = decoder(False)
    assert feed(d, out, [1, 3, 0]) == [" ", "\ufffd\ufffd", "Hi"]  # F0 9F, then FF


@pytest.mark.parametrize("strict", [True, False])
def test_flush_reports_an_unfinished_character(strict: bool) -> None:
    d, out = decoder(strict)
    feed(d, out, [0, 4])
    assert d.flush(7) == "\ufffd"
    (diag,) = out.diagnostics
    assert diag.kind is RecoveryKind.INVALID_UTF8 and diag.token_index == 7
    assert d.text() == "Hi"  # flush returns the tail; the caller adds it
    d.reset()
    assert (d.text(), d.pending, d.delta, d.flush(8)) == ("", b"", None, "")


def test_unknown_id_strict_swallows_the_rest_of_the_message() -> None:
    d, out = decoder(True)
    assert feed(d, out, [0, 999, 5, -1]) == ["Hi", None, None, None]
    assert d.flush(4) == "\ufffd"
    assert [x.kind for x in out.diagnostics] == [RecoveryKind.INVALID_TOKEN]
    d.reset()  # the next message decodes again
    assert feed(d, out, [5]) == ["é"]


@pytest.mark.parametrize("bad", [999, len(TABLE), -1, -5])
def test_unknown_id_lenient_is_one_replacement(bad: int) -> None:
    d, out = decoder(False)
    assert feed(d, out, [4, bad, 5]) == [None, "\ufffd\ufffd", "é"]
    assert d.text() == "\ufffd\ufffdé"  # the held bytes, then the id
    (diag,) = out.diagnostics
    assert diag.kind is RecoveryKind.INVALID_TOKEN and diag.tokens == (bad,)


def test_events_only_while_wanted() -> None:
    d, out = decoder(False)
    feed(d, out, [0])
    out.events = []
    feed(d, out, [1, 2, 3])
    events = out.events
    assert [type(e) for e in events] == [ContentDelta, ContentDelta, Diagnostic, ContentDelta]
    assert [e.token_index for e in events] == [1, 2, 3, 3]
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == " 💖\ufffd"


def test_text_joins_lazily_and_stays_correct() -> None:
    d, out = decoder(True)
    seen = ""
    for t in [0, 5, 1, 2, 0]:
        seen += feed(d, out, [t])[0] or ""
        assert d.text() == seen


def test_text_read_after_every_token_grows_in_place() -> None:
    # ``current_content`` read after each token (the reference's way to follow a
    # stream) joined the whole text again per call. Counted in memory, not time: grown
    # in place, the traced peak is about one text; a copy per call holds two.
    import tracemalloc

    d, _ = decoder(strict=False)
    for _ in range(50_000):
        d.add(0)
        d.text()
    size = len(d.text())
    tracemalloc.start()
    try:
        for _ in range(200):
            d.add(0)
            d.text()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert d.text() == "Hi" * 50_200
    assert peak < 1.5 * size
