"""Properties: render-then-parse is the identity; no input crashes the parser."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st
from parse_support import ENC, SETTINGS

import harmonia as h
from harmonia import (
    Author,
    ContentDelta,
    HarmonyError,
    Message,
    MessageDone,
    MessageStarted,
    Role,
    StreamableParser,
)
from harmonia._names import CONSTRAIN

# -- what round-trips ---------------------------------------------------------------------
#
# Header fields are words: no whitespace (Unicode White_Space ends or trims them),
# no '<' (a channel ends there, and special-token text would be read as markers).
# Content types without a recipient round-trip only in their <|constrain|> form (a
# lone bare word after the channel is a recipient, as in the reference), a tool's
# name must be a tool name (``namespace.name``, or ``python``), a channel must not
# be empty (strict mode refuses ``<|channel|>`` without a value, as the
# reference does), recipient "all" is not rendered, and parsed messages have
# exactly one text part.

_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)
_word_chars = st.characters(
    blacklist_characters=_WS + "\x1c\x1d\x1e\x1f<",  # the renderer refuses all str.isspace()
    codec="utf-8",
)
word = st.text(_word_chars, min_size=1, max_size=12)
plain_words = st.sampled_from(
    ["functions.get_weather", "functions.get-weather", "browser.search", "python", "a.b.c", "x"]
)
field_word = st.one_of(plain_words, word)
_name_part = st.text(st.sampled_from("abcxyzABCXYZ0189_-"), min_size=1, max_size=8)
tool_names = st.one_of(
    st.sampled_from(["functions.get_weather", "browser.search", "python", "container.exec"]),
    st.builds(".".join, st.lists(_name_part, min_size=2, max_size=3)),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(list(Role)))
    if role is Role.TOOL:
        name: str | None = draw(tool_names)
    else:
        name = draw(st.one_of(st.none(), st.text(_word_chars, min_size=1, max_size=8)))
    text = draw(st.text(st.characters(codec="utf-8"), max_size=40))
    recipient = draw(st.one_of(st.none(), field_word.filter(lambda w: w != "all")))
    ct_constrain = st.builds(
        lambda ws, w: CONSTRAIN + ws + w,
        st.sampled_from(["", " ", "  "]),
        st.one_of(st.just("json"), word.filter(lambda w: not w.startswith("to="))),
    )
    if recipient is None:
        content_type = draw(st.one_of(st.none(), ct_constrain))
    else:
        bare = st.one_of(st.sampled_from(["json", "code"]), word).filter(
            lambda w: not w.startswith(("to=", CONSTRAIN))
        )
        content_type = draw(st.one_of(st.none(), ct_constrain, bare))
    channel = draw(st.one_of(st.none(), st.sampled_from(["analysis", "commentary", "final"]), word))
    # Empty fields ("", a bare <|constrain|>) are refused by the renderer.
    return Message(Author(role, name), [h.TextContent(text)], channel, recipient, content_type)


def render(msgs: list[Message]) -> list[int]:
    return [t for m in msgs for t in ENC.render(m)]


@SETTINGS
@given(st.lists(messages(), max_size=4))
def test_render_then_parse_is_the_identity(msgs: list[Message]) -> None:
    tokens = render(msgs)
    assert ENC.parse_messages_from_completion_tokens(tokens) == msgs
    assert ENC.parse_messages_from_completion_tokens(tokens, strict=False) == msgs
    p = StreamableParser(ENC, None)
    for t in tokens:
        p.process(t)
    p.process_eos()
    assert p.messages == msgs
    assert p.diagnostics == ()


@SETTINGS
@given(st.lists(messages(), min_size=1, max_size=3), st.booleans())
def test_render_then_parse_as_completion(msgs: list[Message], stop: bool) -> None:
    """The prompt ended with ``<|start|>{role}``; the completion is the rest."""
    first = msgs[0]
    assume(first.author.role is not Role.TOOL and first.author.name is None)
    tokens = render(msgs)
    role_tokens = ENC.encode_ordinary(first.author.role.value)
    assert tokens[1 : 1 + len(role_tokens)] == role_tokens
    completion = tokens[1 + len(role_tokens) :]
    if not stop:
        completion = completion[:-1]  # the guide: "do not pass in the stop token"
    assert ENC.parse_messages_from_completion_tokens(completion, first.author.role) == msgs


# -- arbitrary token streams ------------------------------------------------------------------

FORMAT = [200006, 200007, 200008, 200005, 200003, 200002, 200012]
STOPS = (200002, 200007, 200012)
token_ids = st.one_of(
    st.sampled_from(FORMAT),
    st.sampled_from(FORMAT),
    st.sampled_from([173781, 1428, 17196, 35644, 12606, 815, 316, 28, 44580, 4108, 220, 198]),
    st.sampled_from([9552, 31446, 244, 28823, 199999, 200013, 201088]),  # bad bytes, odd specials
    st.integers(0, 201088),
    st.sampled_from([201089, 250000, 2**32 - 1, -1]),  # not in the vocabulary
)
streams = st.tuples(st.lists(token_ids, max_size=40), st.sampled_from([None, Role.ASSISTANT]))


def run(tokens: list[int], role: Role | None, strict: bool) -> tuple[list[Message], list[str]]:
    """Stream through feed(); check that each message's deltas join to its text."""
    p = StreamableParser(ENC, role, strict=strict)
    pieces: list[str] = []
    texts: list[str] = []

    def consume(events: list[h.ParserEvent]) -> None:
        nonlocal pieces
        for event in events:
            if isinstance(event, MessageStarted):
                pieces = []
            elif isinstance(event, ContentDelta):
                pieces.append(event.text)
            elif isinstance(event, MessageDone):
                texts.append(event.message.content[0].text)  # type: ignore[attr-defined]
                assert "".join(pieces) == texts[-1]

    for t in tokens:
        consume(p.feed(t))
        _ = (p.current_content, p.current_role, p.last_content_delta, p.state_data)
    consume(p.feed_eos())
    assert texts == [m.content[0].text for m in p.messages]  # type: ignore[attr-defined]
    return p.messages, texts


@SETTINGS
@given(streams)
def test_strict_mode_raises_only_harmony_errors(stream: tuple[list[int], Role | None]) -> None:
    tokens, role = stream
    try:
        batch = ENC.parse_messages_from_completion_tokens(tokens, role)
    except HarmonyError as exc:
        assert isinstance(exc, h.ParseError)
        batch = None
    try:
        streamed, _ = run(tokens, role, True)
    except HarmonyError:
        streamed = None
    assert streamed == batch


@SETTINGS
@given(streams)
def test_lenient_mode_never_raises(stream: tuple[list[int], Role | None]) -> None:
    tokens, role = stream
    batch = ENC.parse_messages_from_completion_tokens(tokens, role, strict=False)
    streamed, _ = run(tokens, role, False)
    assert streamed == batch
    # Lenient changes nothing that strict mode reads sensibly, except where the
    # reference's own strict=False differs: a stop token inside a header.
    if all(0 <= t <= 201088 for t in tokens):
        p = StreamableParser(ENC, role)
        try:
            for t in tokens:
                if t in STOPS and p.state is h.StreamState.HEADER:
                    return
                p.process(t)
            p.process_eos()
        except HarmonyError:
            return
        if not any(_nonsense(m) for m in p.messages):
            assert batch == p.messages


def _nonsense(m: Message) -> bool:
    for value in (m.author.name, m.channel, m.recipient):
        if value is not None and "<|" in value:
            return True
    ct = m.content_type
    return ct is not None and "<|" in ct and not ct.startswith(CONSTRAIN)


@SETTINGS
@given(st.lists(messages(), min_size=1, max_size=3), st.data())
def test_lenient_mode_keeps_text_of_damaged_renderings(
    msgs: list[Message], data: st.DataObject
) -> None:
    """Drop one format token from a rendering: no content character is lost.

    Every character of every message's text is in some parsed message (its text,
    or a header field: a header without ``<|message|>`` is read as the reference
    reads it) or in a diagnostic's ``dropped`` text.
    """
    tokens = render(msgs)
    positions = [i for i, t in enumerate(tokens) if t in FORMAT]
    i = data.draw(st.sampled_from(positions))
    damaged = tokens[:i] + tokens[i + 1 :]
    result = h.parse_completion(ENC, damaged, None, strict=False)
    got = "".join(
        f"{m.content[0].text} {m.author.name} {m.channel} {m.recipient} {m.content_type}"  # type: ignore[attr-defined]
        for m in result.messages
    )
    dropped = "".join(d.dropped or "" for d in result.diagnostics)
    for m in msgs:
        text = m.content[0].text  # type: ignore[attr-defined]
        for ch in set(text) - set(_WS):  # the reference normalises header whitespace
            assert ch in got or ch in dropped
