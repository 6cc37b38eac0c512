"""The streaming parser: the reference's behaviour, harmonia's fixes, events and recoveries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import harmonia as h
from harmonia import (
    ContentDelta,
    Diagnostic,
    HarmonyError,
    Message,
    MessageDone,
    MessageStarted,
    ParseError,
    RecoveryKind,
    Role,
    StreamableParser,
    StreamState,
)
from harmonia._parse import parse_completion, parse_text
from harmonia._parse.parser import LENIENT, STRICT, Input
from harmonia.vocabulary import CALL_ID as CALL
from harmonia.vocabulary import END_ID as END
from harmonia.vocabulary import MESSAGE_ID as MESSAGE
from harmonia.vocabulary import RETURN_ID as RETURN
from harmonia.vocabulary import START_ID as START

DATA = Path(__file__).parent / "data"
CATALOGUE = json.loads((DATA / "parse_catalogue.json").read_text(encoding="utf-8"))
TRACES = json.loads((DATA / "parse_traces.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def enc() -> h.HarmonyEncoding:
    return h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)


def toks(enc: h.HarmonyEncoding, text: str) -> list[int]:
    return enc.encode(text, allowed_special="all")


def role_of(name: str | None) -> Role | None:
    return Role(name) if name else None


def compact(messages: list[Message]) -> list[dict[str, Any]]:
    """The catalogue's compact message form."""
    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m.author.role.value}
        if m.author.name is not None:
            d["name"] = m.author.name
        for key in ("channel", "recipient", "content_type"):
            value = getattr(m, key)
            if value is not None:
                d[key] = value
        assert len(m.content) == 1
        d["text"] = m.content[0].text  # type: ignore[attr-defined]
        out.append(d)
    return out


def outcome(fn: Any) -> dict[str, Any]:
    try:
        return {"messages": compact(fn())}
    except ParseError as exc:
        return {"error": str(exc)}


# -- whole, token by token, split at every index ------------------------------------------


def parse_whole(enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, strict: bool) -> Any:
    return outcome(lambda: enc.parse_messages_from_completion_tokens(tokens, role, strict=strict))


def parse_split(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, strict: bool, split: int
) -> Any:
    """Tokens before ``split`` through process(), the rest through feed().

    All the properties are read in between (they must not disturb the state).
    """

    def run() -> list[Message]:
        p = StreamableParser(enc, role, strict=strict)
        for t in tokens[:split]:
            p.process(t)
        _ = (p.current_content, p.messages, p.state_data, p.tokens, p.diagnostics, p.state)
        deltas = [p.current_content]
        for t in tokens[split:]:
            for event in p.feed(t):
                if isinstance(event, MessageStarted):
                    deltas = [""]
                elif isinstance(event, ContentDelta):
                    deltas.append(event.text)
                elif isinstance(event, MessageDone):
                    assert "".join(deltas) == event.message.content[0].text  # type: ignore[attr-defined]
                    deltas = [""]
        p.process_eos()
        return p.messages

    return outcome(run)


def check_all_ways(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, strict: bool
) -> Any:
    whole = parse_whole(enc, tokens, role, strict)
    for split in range(len(tokens) + 1):
        assert parse_split(enc, tokens, role, strict, split) == whole, split
    return whole


@pytest.mark.parametrize("case", CATALOGUE, ids=lambda c: f"{c['id']}")
def test_catalogue(enc: h.HarmonyEncoding, case: dict[str, Any]) -> None:
    """The reference's 76-case catalogue (tests/parse/data/parse_catalogue.json: openai-harmony
    0.0.8's result for each input), with our deliberate fixes."""
    want = case.get("harmonia", case["reference"])
    tokens = toks(enc, case["input"])
    got = check_all_ways(enc, tokens, role_of(case["role"]), case["strict"])
    assert got == want, case.get("why")
    assert (
        outcome(
            lambda: parse_text(enc, case["input"], role_of(case["role"]), strict=case["strict"])
        )
        == want
    )


@pytest.mark.parametrize("case", CATALOGUE, ids=lambda c: f"{c['id']}")
def test_catalogue_lenient_never_raises(enc: h.HarmonyEncoding, case: dict[str, Any]) -> None:
    tokens = toks(enc, case["input"])
    got = check_all_ways(enc, tokens, role_of(case["role"]), False)
    assert "messages" in got
    strict = parse_whole(enc, tokens, role_of(case["role"]), True)
    if "messages" in strict and not _nonsense(strict["messages"]):
        assert got == strict  # lenient changes nothing that strict reads sensibly


def _nonsense(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        for key in ("name", "channel", "recipient"):
            if "<|" in (m.get(key) or ""):
                return True
        ct = m.get("content_type") or ""
        if "<|" in ct and not ct.startswith("<|constrain|>"):
            return True
    return False


# -- token-by-token traces of the reference's streaming parser (data/parse_traces.json) -----------


def snapshot(p: StreamableParser) -> dict[str, Any]:
    return {
        "state": p.state.value,
        "role": p.current_role.value if p.current_role else None,
        "channel": p.current_channel,
        "recipient": p.current_recipient,
        "content_type": p.current_content_type,
        "current_content": p.current_content,
        "last_content_delta": p.last_content_delta,
        "n_messages": len(p.messages),
    }


def reference_messages(raw: list[dict[str, Any]]) -> list[Message]:
    return [Message.from_dict(m) for m in raw]


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t["name"])
def test_traces(enc: h.HarmonyEncoding, trace: dict[str, Any]) -> None:
    p = StreamableParser(enc, role_of(trace["role"]), strict=trace["strict"])
    deltas: list[str] = []
    for row in trace["rows"]:
        if row["token"] is None:
            deltas += [e.text for e in p.feed_eos() if isinstance(e, ContentDelta)]
        elif "error" in row:
            with pytest.raises(ParseError) as info:
                p.process(row["token"])
            assert str(info.value) == row["error"]
            continue
        else:
            deltas += [e.text for e in p.feed(row["token"]) if isinstance(e, ContentDelta)]
        want = {k: v for k, v in row.items() if k != "token"}
        assert snapshot(p) == want, row
    assert p.messages == reference_messages(trace["messages"])
    # The reference's deltas can miss text held back after invalid bytes; the
    # events carry it when the message ends, so they join to the final text.
    assert "".join(deltas) == "".join(m.content[0].text for m in p.messages)  # type: ignore[attr-defined]


def test_lenient_deltas_lose_nothing(enc: h.HarmonyEncoding) -> None:
    # T4 in lenient mode: "Hi" is not held back behind the invalid bytes.
    p = StreamableParser(enc, None, strict=False)
    deltas = []
    for t in [START, 173781, MESSAGE, 9552, 12194]:
        p.process(t)
        deltas.append(p.last_content_delta)
    assert deltas == [None, None, None, " ", "\ufffdHi"]
    p.process_eos()
    assert p.messages[0].content[0].text == " \ufffdHi"  # type: ignore[attr-defined]


# -- rendered conversations -----------------------------------------------------------------------


def sample_messages() -> list[Message]:
    tool = h.Author.new(Role.TOOL, "functions.get_weather")
    return [
        Message.from_role_and_content(Role.USER, "What is the weather in Tokyo? 💖"),
        Message.from_role_and_content(Role.ASSISTANT, "Need the tool.").with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, '{"location": "Tokyo"}')
        .with_channel("commentary")
        .with_recipient("functions.get_weather")
        .with_content_type("<|constrain|> json"),
        Message.from_author_and_content(tool, '{"sunny": true}')
        .with_channel("commentary")
        .with_recipient("assistant"),
        Message.from_author_and_content(tool, "bare tool result"),
        Message.from_role_and_content(Role.ASSISTANT, '{"a": 1}')
        .with_channel("final")
        .with_content_type("<|constrain|>json"),
        Message.from_author_and_content(h.Author.new(Role.USER, "Bob"), "hi from Bob"),
        Message.from_role_and_content(Role.ASSISTANT, "It is sunny. 日本語").with_channel("final"),
    ]


def test_round_trip_of_the_guides_shapes(enc: h.HarmonyEncoding) -> None:
    messages = sample_messages()
    tokens = [t for m in messages for t in enc.render(m)]
    assert enc.parse_messages_from_completion_tokens(tokens) == messages
    assert check_all_ways(enc, tokens, None, True) == {"messages": compact(messages)}
    # As a completion: the prompt ended with <|start|>user.
    assert enc.parse_messages_from_completion_tokens(tokens[2:], Role.USER) == messages


def test_recipient_in_either_section(enc: h.HarmonyEncoding) -> None:
    want = (
        Message.from_role_and_content(Role.ASSISTANT, '{"location":"San Francisco"}')
        .with_channel("commentary")
        .with_recipient("functions.get_current_weather")
        .with_content_type("<|constrain|>json")
    )
    guide = (
        "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
        '{"location":"San Francisco"}<|call|>'
    )
    rendered = enc.decode_utf8(enc.render(want))
    assert rendered.startswith("<|start|>assistant to=functions.get_current_weather<|channel|>")
    assert parse_text(enc, guide, Role.ASSISTANT) == [want]
    assert parse_text(enc, rendered) == [want]
    glued = guide.replace(" <|constrain|>", "<|constrain|>")
    assert parse_text(enc, glued, Role.ASSISTANT) == [want]


def test_docs_streaming_example(enc: h.HarmonyEncoding) -> None:
    tokens = [
        200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 220, 17, 659, 220, 17, 16842,
        12295, 81645, 13, 51441, 6052, 13, 200007, 200006, 173781, 200005, 17196, 200008, 17,
        659, 220, 17, 314, 220, 19, 13, 200002,
    ]  # fmt: skip
    msgs = enc.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT)
    assert [(m.channel, m.content[0].text) for m in msgs] == [  # type: ignore[attr-defined]
        ("analysis", 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.'),
        ("final", "2 + 2 = 4."),
    ]


# -- errors ---------------------------------------------------------------------------------------


def test_parse_error_names_state_token_and_index(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT)
    for t in toks(enc, "<|channel|>final<|message|>Answer<|end|>"):
        p.process(t)
    with pytest.raises(ParseError) as info:
        p.process(RETURN)
    e = info.value
    assert isinstance(e, HarmonyError) and isinstance(e, h.ModelOutputError)
    assert str(e) == "Unexpected token 200002 while expecting start token 200006"
    assert (e.state, e.token, e.token_text, e.token_index) == (
        "ExpectStart",
        RETURN,
        "<|return|>",
        5,
    )
    assert "at index 5" in e.describe()
    assert p.tokens[-1] == RETURN  # kept, as in the reference
    assert p.state is StreamState.EXPECT_START


def test_refused_header_leaves_expect_start(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, None)
    tokens = toks(enc, "<|start|>assistant<|channel|>commentary a b c<|message|>")
    for t in tokens[:-1]:
        p.process(t)
    with pytest.raises(ParseError) as info:
        p.process(tokens[-1])
    assert info.value.reason == 'unexpected tokens remaining in message header: Some("a")'
    assert (info.value.state, info.value.token, info.value.token_index) == (
        "Header",
        MESSAGE,
        len(tokens) - 1,
    )
    assert p.state is StreamState.EXPECT_START


def test_eos_in_header(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, None).process(START)
    with pytest.raises(ParseError) as info:
        p.process_eos()
    assert str(info.value) == "Unexpected EOS while waiting for message header to complete"
    assert info.value.token is None and info.value.state == "Header"
    assert "end of stream" in info.value.describe()


def test_invalid_token_ids_in_strict_mode(enc: h.HarmonyEncoding) -> None:
    # Unknown and negative ids behave alike: an error between messages and in a
    # header; in content, the reference's single U+FFFD for the rest of the message.
    for bad in (250000, 201089, 2**32 - 1, 2**40, -1):
        with pytest.raises(ParseError, match=f"Unexpected token {bad} while"):
            enc.parse_messages_from_completion_tokens([bad])
        with pytest.raises(ParseError, match="could not decode header"):
            enc.parse_messages_from_completion_tokens([START, bad, MESSAGE])
        p = StreamableParser(enc, Role.ASSISTANT)
        for t in [MESSAGE, *toks(enc, "ab"), bad, *toks(enc, "cd"), END]:
            p.process(t)
        assert p.messages[0].content[0].text == "ab\ufffd"  # type: ignore[attr-defined]
        assert [d.kind for d in p.diagnostics] == [RecoveryKind.INVALID_TOKEN]


# -- properties of the objects ------------------------------------------------------------------


def test_messages_are_fresh(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT)
    for t in toks(enc, "<|channel|>final<|message|>Hi<|end|>"):
        p.process(t)
    first = p.messages
    first[0].content[0].text = "changed"  # type: ignore[attr-defined]
    first[0].author.name = "x"
    first.clear()
    assert compact(p.messages) == [{"role": "assistant", "channel": "final", "text": "Hi"}]
    tokens = p.tokens
    tokens.clear()
    assert len(p.tokens) == 5


def test_state_data(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, None)
    assert p.state_data == {"state": "ExpectStart"}
    for t in toks(enc, "<|start|>assistant to=functions.f"):
        p.process(t)
    assert p.state_data == {
        "state": "Header",
        "header_tokens": toks(enc, "assistant to=functions.f"),
    }
    for t in toks(enc, "<|message|>Hello world"):
        p.process(t)
    assert p.state_data == {
        "state": "Content",
        "header": {
            "author": {"role": "assistant"},
            "recipient": "functions.f",
            "channel": None,
            "content_type": None,
        },
        "content_tokens": toks(enc, "Hello") + toks(enc, " world"),
    }


def test_current_content_is_cached_correctly(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT).process(MESSAGE)
    seen = ""
    for t in toks(enc, "one two three 💖 four"):
        p.process(t)
        seen += p.last_content_delta or ""
        assert p.current_content == seen
    assert p.current_content == "one two three 💖 four"


def test_multibyte_character_split_across_tokens(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT).process(MESSAGE)
    assert p.feed(31446) == []  # F0 9F 92: no half character
    assert p.last_content_delta is None
    (delta,) = p.feed(244)
    assert isinstance(delta, ContentDelta) and delta.text == "💖" and delta.token_index == 2
    assert p.last_content_delta == "💖"


def test_event_api(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT)
    events = []
    for t in toks(
        enc, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
    ):
        events += p.feed(t)
    events += p.feed_eos()
    started, delta, done = events
    assert isinstance(started, MessageStarted)
    assert (started.header.channel, started.header.recipient, started.header.content_type) == (
        "commentary",
        "functions.f",
        "<|constrain|>json",
    )
    assert isinstance(delta, ContentDelta) and delta.text == "{}"
    assert isinstance(done, MessageDone) and done.stop_token == CALL
    assert done.message == p.messages[0]
    assert done.message is not p.messages[0]


def test_end_of_stream_completes_the_message(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT)
    for t in [MESSAGE, 9552]:  # " " + the first two bytes of a 4-byte character
        p.process(t)
    events = p.feed_eos()
    assert [type(e) for e in events] == [Diagnostic, ContentDelta, MessageDone]
    assert p.messages[0].content[0].text == " \ufffd"  # type: ignore[attr-defined]
    done = events[-1]
    assert isinstance(done, MessageDone) and done.stop_token is None


def test_role_as_string_is_accepted(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, "assistant")  # type: ignore[arg-type]
    assert p.current_role is Role.ASSISTANT


def test_transition_tables_cover_every_cell() -> None:
    for state in StreamState:
        assert (state, Input.OTHER) in STRICT
        assert (state, Input.EOS) in STRICT
    assert set(LENIENT) - set(STRICT) <= {
        (StreamState.EXPECT_START, Input.CHANNEL),
        (StreamState.HEADER, Input.STOP),
    }


# -- lenient recoveries ------------------------------------------------------------------


def lenient(
    enc: h.HarmonyEncoding, text: str | list[int], role: Role | None = Role.ASSISTANT
) -> tuple[list[dict[str, Any]], list[Diagnostic]]:
    tokens = toks(enc, text) if isinstance(text, str) else text
    whole = check_all_ways(enc, tokens, role, False)
    result = parse_completion(enc, tokens, role, strict=False)
    assert {"messages": compact(result.messages)} == whole
    return whole["messages"], list(result.diagnostics)


def kinds(diagnostics: list[Diagnostic]) -> list[str]:
    return [d.kind.value for d in diagnostics]


def test_recover_junk_between_messages(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "<|channel|>final<|message|>Answer<|end|><|return|>garbage\n")
    assert msgs == [{"role": "assistant", "channel": "final", "text": "Answer"}]
    (d,) = diags
    assert d.kind is RecoveryKind.JUNK_BETWEEN_MESSAGES
    assert d.token_index == 5 and d.dropped == "<|return|>garbage\n"
    assert d.tokens == (RETURN, *toks(enc, "garbage\n"))
    assert "junk-between-messages at token 5" in str(d)


def test_recover_junk_then_next_message(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(
        enc,
        "<|channel|>analysis<|message|>a<|end|>\n\n<|start|>assistant<|channel|>final<|message|>b",
    )
    assert [m["text"] for m in msgs] == ["a", "b"]
    assert kinds(diags) == ["junk-between-messages", "truncated"]  # "b" has no stop token


def test_recover_repeated_start(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "<|start|>assistant<|channel|>final<|message|>Hi<|end|>")
    assert msgs == [{"role": "assistant", "channel": "final", "text": "Hi"}]
    assert kinds(diags) == ["repeated-start"]
    msgs, diags = lenient(enc, "<|start|><|start|>user<|message|>Hi<|end|>", None)
    assert msgs == [{"role": "user", "text": "Hi"}]
    assert kinds(diags) == ["repeated-start"]


def test_recover_stray_channel_before_analysis(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "<|channel|>commentary<|channel|>analysis<|message|>think<|end|>")
    assert msgs == [{"role": "assistant", "channel": "analysis", "text": "think"}]
    (d,) = diags
    assert d.kind is RecoveryKind.HEADER_REPAIRED and d.dropped == "<|channel|>commentary"
    # ... and between messages, where <|start|> was forgotten
    msgs, diags = lenient(
        enc,
        "<|channel|>final<|message|>a<|end|><|channel|>commentary<|start|>assistant"
        "<|channel|>analysis<|message|>b<|end|>",
    )
    assert [(m.get("channel"), m["text"]) for m in msgs] == [("final", "a"), ("analysis", "b")]
    assert kinds(diags) == ["missing-start", "missing-message"]


def test_recover_missing_start(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "<|channel|>analysis<|message|>a<|end|><|channel|>final<|message|>b")
    assert [(m.get("channel"), m["text"]) for m in msgs] == [("analysis", "a"), ("final", "b")]
    assert kinds(diags) == ["missing-start", "truncated"]


def test_recover_extra_words(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(
        enc, "<|channel|>commentary to=functions.f to=functions.f<|message|>{}<|call|>"
    )
    assert msgs == [
        {"role": "assistant", "channel": "commentary", "recipient": "functions.f", "text": "{}"}
    ]
    assert kinds(diags) == ["header-repaired"]
    assert diags[0].dropped == "to=functions.f"


def test_recover_unknown_role(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(
        enc, "<|start|><|message|>x<|end|><|start|><|reserved_200013|>user<|message|>y", None
    )
    assert msgs == [{"role": "assistant", "text": "x"}, {"role": "user", "text": "y"}]
    assert kinds(diags) == ["header-repaired", "header-repaired", "truncated"]


def test_recover_missing_message_token(enc: h.HarmonyEncoding) -> None:
    # The reference recovers only a role-given parser's first message ...
    msgs, diags = lenient(
        enc, "I  must\n\trefuse<|end|><|start|>assistant<|channel|>final<|message|>No."
    )
    assert msgs == [
        {"role": "assistant", "text": "I must refuse"},
        {"role": "assistant", "channel": "final", "text": "No."},
    ]
    assert kinds(diags) == ["missing-message", "truncated"]
    assert diags[0].kept == "I must refuse"
    # ... and drops any other header a stop token ends; lenient mode returns the
    # same messages, and the diagnostic keeps the dropped text.
    msgs, diags = lenient(enc, "<|start|>assistant<|channel|>commentary Hello<|end|>", None)
    assert msgs == []
    assert kinds(diags) == ["missing-message"]
    assert diags[0].dropped == "assistant<|channel|>commentary Hello"
    # A header without text is dropped, and the diagnostic says so.
    msgs, diags = lenient(enc, "<|start|>assistant<|channel|>final<|end|>", None)
    assert msgs == []
    assert diags[0].dropped == "assistant<|channel|>final"


def test_recover_header_cut_by_start(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(
        enc,
        "<|start|>assistant<|channel|>analysis thinking"
        "<|start|>assistant<|channel|>final<|message|>4",
        None,
    )
    assert msgs == [
        {"role": "assistant", "channel": "analysis", "text": "thinking"},
        {"role": "assistant", "channel": "final", "text": "4"},
    ]
    assert kinds(diags) == ["missing-message", "truncated"]


def test_first_message_recovery_matches_reference(enc: h.HarmonyEncoding) -> None:
    # The reference's strict=False answer for a role-given parser's first header
    # (text with <|start|> and all) is kept.
    msgs, _ = lenient(enc, "<|channel|>analysis hi<|start|>there<|end|>")
    assert msgs == [{"role": "assistant", "channel": "analysis", "text": "hi<|start|>there"}]


def test_recover_truncated_header(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "I refuse")
    assert msgs == [{"role": "assistant", "text": "I refuse"}]
    assert kinds(diags) == ["truncated"]
    msgs, diags = lenient(enc, "<|start|>user<|message|>q<|end|><|start|>assistant", None)
    assert msgs == [{"role": "user", "text": "q"}]
    assert kinds(diags) == ["truncated"]  # the prompt's trailing <|start|>assistant
    assert diags[0].dropped == "assistant"


def test_recover_invalid_utf8(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, [MESSAGE, 9552, *toks(enc, "Hi"), END])
    assert msgs == [{"role": "assistant", "text": " \ufffdHi"}]
    assert kinds(diags) == ["invalid-utf8"]
    assert diags[0].tokens == (toks(enc, "Hi")[0],)
    # "assistant" and a broken character: no tool's name, so the role is repaired
    msgs, diags = lenient(enc, [START, 173781, 28823, MESSAGE, *toks(enc, "x")], None)
    assert msgs == [{"role": "assistant", "text": "x"}]
    assert kinds(diags) == ["invalid-utf8", "header-repaired", "truncated"]
    assert diags[1].dropped == "assistant\ufffd"


def test_recover_invalid_token_ids(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, [MESSAGE, *toks(enc, "ab"), 250000, *toks(enc, "cd"), END, -5])
    assert msgs == [{"role": "assistant", "text": "ab\ufffdcd"}]  # nothing after the id is lost
    assert kinds(diags) == ["invalid-token", "junk-between-messages"]
    assert "1 invalid token id" in diags[1].description


def test_recover_empty_completion(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, [])
    assert msgs == []
    assert kinds(diags) == ["truncated"]


def test_lenient_diagnostics_as_events(enc: h.HarmonyEncoding) -> None:
    p = StreamableParser(enc, Role.ASSISTANT, strict=False)
    events = []
    for t in toks(enc, "I refuse<|end|>"):
        events += p.feed(t)
    assert [type(e) for e in events] == [Diagnostic, MessageStarted, ContentDelta, MessageDone]
    assert events[0] is p.diagnostics[0]


def test_parse_tokens_and_text_agree(enc: h.HarmonyEncoding) -> None:
    text = (
        "<|channel|>analysis<|message|>a<|end|>"
        "<|start|>assistant<|channel|>final<|message|>b<|return|>"
    )
    assert (
        parse_text(enc, text, Role.ASSISTANT)
        == parse_completion(enc, toks(enc, text), Role.ASSISTANT).messages
    )
    assert h.parse_text is parse_text and h.parse_completion is parse_completion


def test_lenient_drops_a_later_header_without_message_but_keeps_its_text(
    enc: h.HarmonyEncoding,
) -> None:
    """As the reference's strict=False, the messages leave the header out; the
    diagnostic carries its text, so nothing is lost silently."""
    text = (
        "<|channel|>analysis<|message|>a<|end|>"
        "<|start|>assistant<|channel|>final The answer is 4<|return|>"
    )
    result = h.parse_completion(enc, text, h.Role.ASSISTANT, strict=False)
    assert [m.text for m in result.messages] == ["a"]
    [diag] = result.diagnostics
    assert diag.kind is h.RecoveryKind.MISSING_MESSAGE
    assert diag.dropped is not None and "The answer is 4" in diag.dropped
    assert diag.tokens and enc.decode_utf8(list(diag.tokens)).endswith("The answer is 4")


# -- strict mode refuses junk; lenient mode repairs it (hardening, item 3) --------------------


@pytest.mark.parametrize(
    ("text", "role", "reason"),
    [
        # An empty channel: the reference refuses it too.
        (
            "<|channel|><|message|>Hi<|return|>",
            Role.ASSISTANT,
            "channel marker present but no channel value found in header",
        ),
        # Authors that are neither a role nor a tool name.
        ("<|start|>assistantfinal<|message|>x<|end|>", None, "Unknown role: assistantfinal"),
        ("<|start|>toolassistant<|message|>x<|end|>", None, "Unknown role: toolassistant"),
        ("<|start|>assistantü<|message|>x<|end|>", None, "Unknown role: assistantü"),
        (
            "<|start|>browser.search=assistant<|channel|>commentary<|message|>x<|end|>",
            None,
            "Unknown role: browser.search=assistant",
        ),
        (
            "<|start|>assistantfinal to=functions.f<|message|>x<|end|>",
            None,
            "Unknown role: assistantfinal (not a role, nor a tool name",
        ),
        # The prompt's <|start|> repeated by a role-given completion.
        (
            "<|start|>user<|message|>hi<|end|>",
            Role.ASSISTANT,
            "special token in the message header's recipient: '<|start|>user'",
        ),
    ],
)
def test_strict_mode_refuses_junk_headers(
    enc: h.HarmonyEncoding, text: str, role: Role | None, reason: str
) -> None:
    with pytest.raises(ParseError) as info:
        parse_text(enc, text, role)
    assert str(info.value).startswith(reason)
    assert info.value.state == "Header" and info.value.token == MESSAGE
    lenient_messages = parse_text(enc, text, role, strict=False)  # never raises
    assert all(m.author.role is not Role.TOOL for m in lenient_messages)


def test_junk_headers_read_leniently(enc: h.HarmonyEncoding) -> None:
    msgs, diags = lenient(enc, "<|start|>assistantfinal<|message|>x<|end|>", None)
    assert msgs == [{"role": "assistant", "channel": "final", "text": "x"}]
    assert kinds(diags) == ["header-repaired"]
    msgs, diags = lenient(enc, "<|start|>browser.search=assistant<|message|>x<|end|>", None)
    assert msgs == [{"role": "assistant", "text": "x"}]
    assert diags[0].dropped == "browser.search=assistant"
    msgs, diags = lenient(enc, "<|channel|><|message|>Hi<|return|>")
    assert msgs == [{"role": "assistant", "channel": "", "text": "Hi"}]
    assert kinds(diags) == ["header-repaired"]


def test_repeated_start_has_one_reading(enc: h.HarmonyEncoding) -> None:
    # Strict mode refuses it (above); lenient mode reads the user message.
    msgs, diags = lenient(enc, "<|start|>user<|message|>hi<|end|>", Role.ASSISTANT)
    assert msgs == [{"role": "user", "text": "hi"}]
    assert kinds(diags) == ["repeated-start"]


def test_tool_names_still_read_strictly(enc: h.HarmonyEncoding) -> None:
    text = (
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{}<|end|>"
        "<|start|>python<|message|>out<|end|><|start|>browser.search<|message|>r<|end|>"
        "<|start|>tool<|message|>t<|end|>"
    )
    assert [m.author.name for m in parse_text(enc, text)] == [
        "functions.get_weather",
        "python",
        "browser.search",
        "tool",
    ]


# -- lenient mode loses no header word (item 5) -------------------------------------------------


def test_lenient_keeps_the_words_of_damaged_channel_markers(enc: h.HarmonyEncoding) -> None:
    result = enc.parse_completion(
        "<|channel|> secret<|channel|>final hi", Role.ASSISTANT, strict=False
    )
    assert [(m.channel, m.text) for m in result.messages] == [("final", "hi")]
    (diag,) = result.diagnostics
    assert diag.kind is RecoveryKind.TRUNCATED
    assert diag.dropped is not None and "secret" in diag.dropped


# -- a completion cut off inside a message (item 6) ---------------------------------------------

CUT_CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "To'


def test_truncated_message_is_diagnosed_in_lenient_mode(enc: h.HarmonyEncoding) -> None:
    result = parse_completion(enc, CUT_CALL, Role.ASSISTANT, strict=False)
    [call] = result.messages
    assert call.recipient == "functions.get_weather" and call.text == '{"city": "To'
    [diag] = result.diagnostics
    assert diag.kind is RecoveryKind.TRUNCATED
    assert diag.token_index == len(toks(enc, CUT_CALL))
    assert "functions.get_weather" in diag.description
    # With its stop token, the same call is complete: no diagnostic.
    assert parse_completion(enc, CUT_CALL + '"}<|call|>', Role.ASSISTANT, strict=False)[1] == ()


def test_truncation_only_at_the_end_of_the_stream(enc: h.HarmonyEncoding) -> None:
    # Partial input is not an error until the caller says the stream ended.
    p = StreamableParser(enc, Role.ASSISTANT, strict=False)
    events = [e for t in toks(enc, CUT_CALL) for e in p.feed(t)]
    assert not any(isinstance(e, Diagnostic) for e in events) and p.diagnostics == ()
    assert p.state is StreamState.CONTENT and p.current_content == '{"city": "To'
    truncated, done = p.feed_eos()
    assert isinstance(truncated, Diagnostic) and truncated.kind is RecoveryKind.TRUNCATED
    assert isinstance(done, MessageDone) and done.stop_token is None


def test_strict_mode_refuses_a_truncated_completion_when_asked(enc: h.HarmonyEncoding) -> None:
    # By default the guide's usage stands: a completion without its stop token.
    assert parse_text(enc, CUT_CALL, Role.ASSISTANT)[0].text == '{"city": "To'
    assert parse_completion(enc, CUT_CALL, Role.ASSISTANT).diagnostics == ()
    with pytest.raises(ParseError) as info:
        parse_completion(enc, CUT_CALL, Role.ASSISTANT, complete=True)
    e = info.value
    assert (e.state, e.token, e.token_index) == ("Content", None, len(toks(enc, CUT_CALL)))
    assert "without <|end|>, <|return|> or <|call|>" in str(e)
    # The parser is left as it was: the partial message can still be taken.
    p = StreamableParser(enc, Role.ASSISTANT)
    for t in toks(enc, CUT_CALL):
        p.process(t)
    with pytest.raises(ParseError):
        p.process_eos(complete=True)
    assert p.state is StreamState.CONTENT and p.messages == []
    assert p.process_eos().messages[0].text == '{"city": "To'
    # complete=True accepts a completion that ends between messages.
    done = parse_completion(enc, CUT_CALL + "<|call|>", Role.ASSISTANT, complete=True)
    assert len(done.messages) == 1
    assert parse_completion(enc, CUT_CALL, Role.ASSISTANT, strict=False, complete=True)[0]


@pytest.mark.parametrize("role", [None, Role.ASSISTANT])
@pytest.mark.parametrize("prefix", ["<|start|>", ""])
def test_role_glued_to_a_channel_is_recovered(
    enc: h.HarmonyEncoding, role: Role | None, prefix: str
) -> None:
    """``<|start|>assistantanalysis<|message|>`` (the <|channel|> lost): the role and
    the channel, and the word as written kept in the diagnostic's text."""
    if role is None and not prefix:  # text where <|start|> belongs: dropped, with its text
        msgs, diags = lenient(enc, "assistantanalysis<|message|>Hi<|end|>", role)
        assert msgs == [] and "assistantanalysis" in (diags[0].dropped or "")
        return
    msgs, diags = lenient(enc, prefix + "assistantanalysis<|message|>Hi<|end|>", role)
    assert msgs == [{"role": "assistant", "channel": "analysis", "text": "Hi"}]
    assert kinds(diags)[-1] == "header-repaired"
    assert "'assistantanalysis'" in (diags[-1].kept or "")
    call = prefix + "assistantcommentary to=functions.f<|message|>{}<|call|>"
    msgs, _ = lenient(enc, call, role)
    assert msgs == [
        {"role": "assistant", "channel": "commentary", "recipient": "functions.f", "text": "{}"}
    ]
    # Another word stays where it was read, as strict mode reads it.
    msgs, diags = lenient(enc, prefix + "assistantweird<|message|>x<|end|>", role)
    assert "assistantweird" in str(msgs) + " ".join(str(d) for d in diags)
