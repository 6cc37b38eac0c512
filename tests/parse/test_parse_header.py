"""Header reading: the reference's algorithm, fixes F1-F4, refused junk, the lenient reader."""

from __future__ import annotations

import pytest

from harmonia import Role
from harmonia._parse.header import (
    HeaderError,
    MessageHeader,
    header_as_text,
    is_nonsense,
    is_tool_name,
    parse_header,
    recover_header,
    rust_debug,
)

A = Role.ASSISTANT


def fields(h: MessageHeader) -> tuple[object, ...]:
    return (h.role, h.name, h.channel, h.recipient, h.content_type)


# -- the reference's readings (kept) ---------------------------------------------------

REFERENCE_READINGS = [
    # (header, given role, (role, name, channel, recipient, content_type))
    ("<|channel|>final", A, (A, None, "final", None, None)),
    ("", A, (A, None, None, None, None)),
    ("assistant<|channel|>final", A, (A, None, "final", None, None)),
    ("user<|channel|>final", A, (A, None, "final", "user", None)),
    ("assistant<|channel|>final", None, (A, None, "final", None, None)),
    ("assistant\n<|channel|>final", None, (A, None, "final", None, None)),
    ("user", None, (Role.USER, None, None, None, None)),
    ("system", None, (Role.SYSTEM, None, None, None, None)),
    ("tool", None, (Role.TOOL, "tool", None, None, None)),
    (
        "functions.f to=assistant<|channel|>commentary",
        None,
        (Role.TOOL, "functions.f", "commentary", "assistant", None),
    ),
    ("functions.f json", None, (Role.TOOL, "functions.f", None, "json", None)),
    (
        "assistant to=functions.f<|channel|>commentary",
        None,
        (A, None, "commentary", "functions.f", None),
    ),
    (
        "assistant<|channel|>commentary to=functions.f",
        None,
        (A, None, "commentary", "functions.f", None),
    ),
    (
        "assistant<|channel|>commentary to=functions.f json",
        None,
        (A, None, "commentary", "functions.f", "json"),
    ),
    (
        "assistant<|channel|>commentary to=functions.f <|constrain|>json",
        None,
        (A, None, "commentary", "functions.f", "<|constrain|>json"),
    ),
    (
        "assistant<|channel|>commentary to=functions.f<|constrain|>json",
        None,
        (A, None, "commentary", "functions.f", "<|constrain|>json"),
    ),
    (
        "assistant to=functions.f<|constrain|>json<|channel|>commentary",
        None,
        (A, None, "commentary", "functions.f", "<|constrain|>json"),
    ),
    ("assistant<|channel|>final json", None, (A, None, "final", "json", None)),  # harmony#56
    (
        "assistant<|channel|>commentary functions.f",
        None,
        (A, None, "commentary", "functions.f", None),
    ),
    (
        "assistant<|channel|>commentary functions.f json",
        None,
        (A, None, "commentary", "functions.f", "json"),
    ),
    (
        "assistant<|channel|>analysis to=python code",
        None,
        (A, None, "analysis", "python", "code"),
    ),
    (
        "python to=assistant<|channel|>analysis",
        None,
        (Role.TOOL, "python", "analysis", "assistant", None),
    ),
    (
        "<|channel|>commentary to=functions.get-weather.v2 <|constrain|>json",
        A,
        (A, None, "commentary", "functions.get-weather.v2", "<|constrain|>json"),
    ),
    # \x0b and U+00A0 are not word separators (the reference splits on ASCII whitespace)
    ("assistant to=x\x0bjson", None, (A, None, None, "x\x0bjson", None)),
]


@pytest.mark.parametrize(("text", "role", "want"), REFERENCE_READINGS)
def test_reference_readings(text: str, role: Role | None, want: tuple[object, ...]) -> None:
    assert fields(parse_header(text, role)) == want


REFERENCE_ERRORS = [
    (
        "assistant  <|channel|> final ",
        None,
        "channel marker present but no channel value found in header",
    ),
    (
        "assistant<|channel|><|channel|>x",
        None,
        "channel marker present but no channel value found in header",
    ),
    ("", None, "message header did not contain a role"),
    ("assistant<|channel|>a<|channel|>b", None, "Unknown role: assistant<|channel|>b"),
    ("<|start|>assistant", None, "Unknown role: <|start|>assistant"),
    ("assistant<|reserved_200013|>", None, "Unknown role: assistant<|reserved_200013|>"),
    (
        "assistant<|channel|>commentary a b c",
        None,
        'unexpected tokens remaining in message header: Some("a")',
    ),
    (
        "assistant<|channel|>commentary json to=functions.f",
        None,
        'unexpected tokens remaining in message header: Some("json")',
    ),
    (
        "assistant to=a<|channel|>commentary to=b",
        None,
        'unexpected tokens remaining in message header: Some("to=a")',
    ),
    (
        "assistant<|channel|>commentary to=functions.f to=functions.f",
        None,
        'unexpected tokens remaining in message header: Some("to=functions.f")',
    ),
    (
        "functions.f to=assistant<|channel|>commentary",
        Role.TOOL,
        'unexpected tokens remaining in message header: Some("functions.f")',
    ),
    ("I must refuse", A, 'unexpected tokens remaining in message header: Some("I")'),
    # Rust Debug escaping of the leftover words.
    ('a "q" b c', A, 'unexpected tokens remaining in message header: Some("a \\"q\\"")'),
    ("tool\xa0 x y", A, 'unexpected tokens remaining in message header: Some("tool\\u{a0}")'),
    ("x\u200dy b c", A, 'unexpected tokens remaining in message header: Some("x\\u{200d}y")'),
    ("a\\b c d", A, 'unexpected tokens remaining in message header: Some("a\\\\b")'),
]


@pytest.mark.parametrize(("text", "role", "reason"), REFERENCE_ERRORS)
def test_reference_errors(text: str, role: Role | None, reason: str) -> None:
    with pytest.raises(HeaderError) as info:
        parse_header(text, role)
    assert info.value.reason == reason


def test_fixed_parse_that_still_fails_reports_the_reference_error() -> None:
    # F1 would merge the second <|constrain|>, but the header stays invalid: the
    # error is the reference's, not one about the merged words.
    with pytest.raises(HeaderError) as info:
        parse_header("<|channel|>weird json<|constrain|> <|constrain|> json", A)
    assert (
        info.value.reason
        == 'unexpected tokens remaining in message header: Some("json <|constrain|>")'
    )


# -- the fixes ------------------------------------------------------------------------------

FIXES = [
    # F1: <|constrain|> followed by a space (the guide's example)
    (
        "assistant to=functions.f<|channel|>commentary <|constrain|> json",
        None,
        (A, None, "commentary", "functions.f", "<|constrain|> json"),
    ),
    (
        " to=functions.f<|channel|>commentary <|constrain|>  json",
        A,
        (A, None, "commentary", "functions.f", "<|constrain|>  json"),
    ),
    # F1 + F2
    (
        "assistant<|channel|>commentary <|constrain|> json",
        None,
        (A, None, "commentary", None, "<|constrain|> json"),
    ),
    # F2: a structured final answer
    (
        "assistant<|channel|>final <|constrain|>json",
        None,
        (A, None, "final", None, "<|constrain|>json"),
    ),
    ("<|channel|>final <|constrain|>json", A, (A, None, "final", None, "<|constrain|>json")),
    (
        "functions.f <|constrain|>json",
        None,
        (Role.TOOL, "functions.f", None, None, "<|constrain|>json"),
    ),
    # F3: named authors
    ("user:Bob", None, (Role.USER, "Bob", None, None, None)),
    ("user:", None, (Role.USER, "", None, None, None)),
    ("system:a:b", None, (Role.SYSTEM, "a:b", None, None, None)),
    (
        "assistant:bot to=functions.f<|channel|>commentary",
        None,
        (A, "bot", "commentary", "functions.f", None),
    ),
    # F4: tools without recipient
    ("functions.f", None, (Role.TOOL, "functions.f", None, None, None)),
    (
        "functions.f<|channel|>commentary",
        None,
        (Role.TOOL, "functions.f", "commentary", None, None),
    ),
    ("browser.search", None, (Role.TOOL, "browser.search", None, None, None)),
    ("python", None, (Role.TOOL, "python", None, None, None)),
    ("container.exec to=assistant", None, (Role.TOOL, "container.exec", None, "assistant", None)),
    ("functions.get-weather_2", None, (Role.TOOL, "functions.get-weather_2", None, None, None)),
]


@pytest.mark.parametrize(("text", "role", "want"), FIXES)
def test_fixes(text: str, role: Role | None, want: tuple[object, ...]) -> None:
    assert fields(parse_header(text, role)) == want


# -- junk the reference accepts and strict mode refuses -------------------------------------

_NO_CHANNEL = "channel marker present but no channel value found in header"
_NOT_A_TOOL = "(not a role, nor a tool name such as functions.get_weather or python)"
_SPECIAL = "special token in the message header's"

STRICT_REFUSALS = [
    # An empty channel: the reference refuses it too (harmonia read it as "").
    ("<|channel|>", A, _NO_CHANNEL),
    ("assistant to=f<|channel|> <|constrain|>json", None, _NO_CHANNEL),
    ("<|channel|> final", A, _NO_CHANNEL),
    # An author that is no tool name (the reference makes it a tool's name).
    ("assistantfinal", None, "Unknown role: assistantfinal"),
    ("toolassistant", None, "Unknown role: toolassistant"),
    ("assistantü", None, "Unknown role: assistantü"),
    ("browser.search=assistant", None, "Unknown role: browser.search=assistant"),
    ("tool:x", None, "Unknown role: tool:x"),
    ("assistant\xa0to=x ", None, "Unknown role: assistant\xa0to=x"),
    (" to=foo", None, f"Unknown role: to=foo {_NOT_A_TOOL}"),
    ("assistantfinal x", None, f"Unknown role: assistantfinal {_NOT_A_TOOL}"),
    ("browser.search=assistant<|channel|>x y", None, "Unknown role: browser.search=assistant"),
    ("functions..f x", None, f"Unknown role: functions..f {_NOT_A_TOOL}"),
    # Special-token text in a field (the reference returns it).
    ("<|start|>assistant<|channel|>final", A, f"{_SPECIAL} recipient: '<|start|>assistant'"),
    ("<|start|>user", A, f"{_SPECIAL} recipient: '<|start|>user'"),
]


@pytest.mark.parametrize(("text", "role", "reason"), STRICT_REFUSALS)
def test_strict_refusals(text: str, role: Role | None, reason: str) -> None:
    with pytest.raises(HeaderError) as info:
        parse_header(text, role)
    assert info.value.reason.startswith(reason)


@pytest.mark.parametrize(
    ("word", "ok"),
    [
        ("functions.get_weather", True),
        ("browser.search", True),
        ("python", True),
        ("browser", True),
        ("a.b.c", True),
        ("functions.f-1", True),
        ("functions", False),
        ("assistantfinal", False),
        ("functions.", False),
        (".f", False),
        ("functions.f=x", False),
        ("functions.天気", False),
        ("functions.f:x", False),
    ],
)
def test_tool_names(word: str, ok: bool) -> None:
    assert is_tool_name(word) is ok


def test_nonsense_detection() -> None:
    assert is_nonsense(MessageHeader(A, recipient="<|constrain|>json"))
    assert is_nonsense(MessageHeader(A, channel="a<|end|>"))
    assert is_nonsense(MessageHeader(Role.TOOL, name="<|start|>assistant"))
    assert is_nonsense(MessageHeader(A, content_type="refuse<|end|>"))
    assert not is_nonsense(MessageHeader(A, content_type="<|constrain|>json"))
    assert not is_nonsense(MessageHeader(A, content_type="<|constrain|>json<|x|>"))
    assert not is_nonsense(MessageHeader(A, channel="final", recipient="functions.f"))


def test_rust_debug() -> None:
    assert rust_debug('a"b\\c\n\t\r\0') == '"a\\"b\\\\c\\n\\t\\r\\0"'
    assert rust_debug("é日本💖") == '"é日本💖"'
    assert rust_debug("\x7f\xa0\u2028\u0301") == '"\\u{7f}\\u{a0}\\u{2028}\\u{301}"'
    assert rust_debug("'") == '"\'"'


# -- the lenient reader ------------------------------------------------------------------------


LENIENT = [
    # gpt-oss-20b's stray channel
    (
        "<|channel|>commentary<|channel|>analysis",
        A,
        (A, None, "analysis", None, None),
        ["<|channel|>commentary"],
    ),
    # duplicated to=
    (
        "<|channel|>commentary to=functions.f to=functions.f",
        A,
        (A, None, "commentary", "functions.f", None),
        ["to=functions.f"],
    ),
    # content type before the recipient
    (
        "<|channel|>commentary <|constrain|>json to=functions.f",
        A,
        (A, None, "commentary", "functions.f", "<|constrain|>json"),
        [],
    ),
    (
        "<|channel|>commentary json to=functions.f",
        A,
        (A, None, "commentary", "functions.f", "json"),
        [],
    ),
    # extra words
    ("<|channel|>commentary a b c", A, (A, None, "commentary", "b", "c"), ["a"]),
    # whitespace after the channel marker
    ("<|channel|> final", A, (A, None, "final", None, None), []),
    # stray special tokens
    (
        "assistant<|reserved_200013|><|channel|>final",
        None,
        (A, None, "final", None, None),
        ["<|reserved_200013|>"],
    ),
    (
        "<|endoftext|>assistant<|channel|>final",
        None,
        (A, None, "final", None, None),
        ["<|endoftext|>"],
    ),
    # no role at all
    ("", None, (A, None, None, None, None), []),
    ("<|channel|>final", None, (A, None, "final", None, None), []),
    # an empty channel
    ("<|channel|>", A, (A, None, "", None, None), []),
    # junk authors: a role glued to a channel, or no tool name
    ("assistantfinal", None, (A, None, "final", None, None), []),
    ("useranalysis", None, (Role.USER, None, "analysis", None, None), []),
    (
        "assistantfinal<|channel|>analysis",
        None,
        (A, None, "analysis", None, None),
        ["assistantfinal"],
    ),
    ("assistantü", None, (A, None, None, None, None), ["assistantü"]),
    ("toolassistant", None, (A, None, None, None, None), ["toolassistant"]),
    ("browser.search=assistant", None, (A, None, None, None, None), ["browser.search=assistant"]),
    (" to=foo", None, (A, None, None, "foo", None), []),
    # the prompt's <|start|> repeated (the parser splits at <|start|>; alone:)
    ("<|start|>user", A, (A, None, None, "user", None), ["<|start|>"]),
]


@pytest.mark.parametrize(("text", "role", "want", "dropped"), LENIENT)
def test_recover_header(
    text: str, role: Role | None, want: tuple[object, ...], dropped: list[str]
) -> None:
    header, recovery = recover_header(text, role, A)
    assert fields(header) == want
    assert list(recovery.dropped) == dropped
    assert not is_nonsense(header)


def test_recover_header_agrees_with_strict_reading_when_that_succeeds() -> None:
    for text, role, want in REFERENCE_READINGS:
        header = parse_header(text, role)
        if not is_nonsense(header):
            assert fields(recover_header(text, role, A)[0]) == want


# -- content mode -------------------------------------------------------------------------------

AS_TEXT = [
    ("<|channel|>commentary Hello", A, (A, None, "commentary", "Hello", ())),
    ("I  must\n\trefuse  now", A, (A, None, None, "I must refuse now", ())),
    (
        "<|channel|>commentary to=functions.f {}",
        A,
        (A, None, "commentary", "to=functions.f {}", ()),
    ),
    ("<|channel|>final", A, (A, None, "final", "", ())),
    ("assistant<|channel|>final hi", A, (A, None, "final", "hi", ())),
    # harmonia extensions: role=None, and an empty channel value
    ("assistant<|channel|>commentary Hello", None, (A, None, "commentary", "Hello", ())),
    ("user:Bob hi", None, (Role.USER, "Bob", None, "hi", ())),
    ("I refuse", None, (A, None, None, "I refuse", ())),
    ("<|channel|> x", A, (A, None, "x", "", ())),
    ("<|channel|>", A, (A, None, "", "", ())),
    # damaged channel markers: the last channel wins, the others are dropped, not lost
    (
        "<|channel|> secret<|channel|>final hi",
        A,
        (A, None, "final", "hi", ("<|channel|> secret",)),
    ),
]


@pytest.mark.parametrize(("text", "role", "want"), AS_TEXT)
def test_header_as_text(text: str, role: Role | None, want: tuple[object, ...]) -> None:
    assert header_as_text(text, role, A) == want


def test_header_author() -> None:
    h = MessageHeader(Role.TOOL, "functions.f", "commentary", "assistant")
    assert h.author.role is Role.TOOL and h.author.name == "functions.f"
    assert h.to_dict() == {
        "author": {"role": "tool", "name": "functions.f"},
        "recipient": "assistant",
        "channel": "commentary",
        "content_type": None,
    }
