"""The streaming parser's hot path changes nothing, however ``process`` and ``feed`` mix.

:meth:`StreamableParser.process` decodes an ordinary content token itself while
the decoder is ready and no events are wanted (:meth:`feed` likewise, making its
one event); a flag set wherever the parser enters a state says when. Here a
parser fed by a random mix of ``process`` and ``feed`` must show, after every
token, what a parser fed by ``process`` alone shows, and the events of the
``feed`` calls must be what the same calls make in a parser fed by ``feed``
alone.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from parse_support import ENC, SETTINGS, fp

from harmonia import Role, StreamableParser

# One token per byte for some characters, so that characters arrive in pieces.
BYTE_TOKEN = {b: i for i, b in enumerate(ENC.tokenizer.token_bytes_table[:50_000]) if len(b) == 1}
PIECES = [
    *(ENC.encode(t) for t in fp.TEXTS if "<|" not in t),
    [BYTE_TOKEN[bytes([b])] for b in "💖é".encode()],
    [BYTE_TOKEN[b"\xf0"], BYTE_TOKEN[b"a"]],  # not UTF-8
    [201089],  # an unknown id
]
bodies = st.lists(st.sampled_from(PIECES), max_size=6).map(lambda ps: [t for p in ps for t in p])
completions = st.lists(
    st.tuples(st.sampled_from(["analysis", "final"]), bodies, st.sampled_from([200007, 200002])),
    min_size=1,
    max_size=3,
)


def tokens_of(messages: list[tuple[str, list[int], int]]) -> list[int]:
    out: list[int] = []
    for channel, body, stop in messages:
        head = f"<|start|>assistant<|channel|>{channel}<|message|>"
        out += [*ENC.encode(head, allowed_special="all"), *body, stop]
    return out


def observe(p: StreamableParser) -> tuple[object, ...]:
    return (p.state, p.last_content_delta, p.current_content, p.current_channel, p.diagnostics)


@SETTINGS
@given(completions, st.lists(st.booleans(), min_size=1), st.booleans())
def test_mixing_process_and_feed(
    messages: list[tuple[str, list[int], int]], how: list[bool], strict: bool
) -> None:
    tokens = tokens_of(messages)
    plain = StreamableParser(ENC, None, strict=strict)
    evented = StreamableParser(ENC, None, strict=strict)
    mixed = StreamableParser(ENC, None, strict=strict)
    for i, token in enumerate(tokens):
        plain.process(token)
        events = evented.feed(token)
        if how[i % len(how)]:
            assert mixed.feed(token) == events
        else:
            mixed.process(token)
        assert observe(mixed) == observe(plain)
    assert mixed.feed_eos() == evented.feed_eos()
    plain.process_eos()
    assert mixed.messages == plain.messages == evented.messages
    assert mixed.diagnostics == plain.diagnostics


def test_a_character_in_pieces_then_plain_text() -> None:
    """The hot path closes while bytes are pending and opens again after them."""
    p = StreamableParser(ENC, Role.ASSISTANT)
    for t in ENC.encode("<|channel|>final<|message|>", allowed_special="all"):
        p.process(t)
    deltas = []
    for t in [*PIECES[-3], *ENC.encode(" ok")]:
        deltas.append(p.process(t).last_content_delta)
    assert deltas == [None, None, None, "💖", None, "é", " ok"]
    assert p.current_content == "💖é ok"
