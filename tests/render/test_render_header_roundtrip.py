"""Every header harmonia renders parses back (strictly) to the same message.

Before: a message with ``channel=""``, a recipient and ``content_type="json"``
rendered ``<|start|>user to=python<|channel|> json<|message|>``, which strict
parsing refused and lenient parsing read as channel "json"; recipients with
spaces, channels with ``<``, a content type without a recipient and more
rendered headers that read back as something else.
Now the renderer refuses those inputs with a RenderError naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmonia import Author, Message, ParseError, RenderError, Role

TRICKY = [
    "",
    " ",
    "a b",
    "x\t",
    "\u3000",
    "<",
    "<|",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|constrain|>json",
    "<|constrain|> json",
    "to=",
    "to=x",
    ":",
    "user",
    "assistant",
    "tool",
    "user:bob",
    "assistant:x",
    "all",
    "json",
    "code",
    "final",
    "analysis",
    "commentary",
    "functions.get_weather",
    "browser.search",
    "é",
    "=",
    "|>",
    "a:b",
]
fields = st.one_of(
    st.none(),
    st.sampled_from(TRICKY),
    st.text(alphabet="ab:=.<|> \n_toé", min_size=0, max_size=6),
)


def build(role: Role, name: Any, recipient: Any, channel: Any, content_type: Any) -> Message:
    message = Message.from_author_and_content(Author(role, name), "hi")
    message.recipient, message.channel, message.content_type = recipient, channel, content_type
    return message


def expected(message: Message) -> dict[str, Any]:
    out = message.to_dict()
    if out.get("recipient") == "all":  # broadcast: the reference writes no recipient
        del out["recipient"]
    return out


def round_trip(enc: Any, message: Message) -> dict[str, Any]:
    (parsed,) = enc.parse_messages_from_completion_tokens(enc.render(message), None, strict=True)
    return dict(parsed.to_dict())


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(list(Role)), fields, fields, fields, fields)
def test_rendered_headers_read_back_or_are_refused(
    enc: Any, role: Role, name: Any, recipient: Any, channel: Any, content_type: Any
) -> None:
    if role is Role.TOOL and name is None:
        name = "functions.f"
    message = build(role, name, recipient, channel, content_type)
    try:
        ids = enc.render(message)
    except RenderError as exc:
        assert exc.path in {"author.name", "recipient", "channel", "content_type"}
        return
    if channel == "":
        # The one exception: rendered as the reference renders it, refused by
        # strict parsing as the reference refuses it (see _check_channel), and
        # read back as it was by lenient parsing.
        with pytest.raises(ParseError):
            enc.parse_messages_from_completion_tokens(ids, None, strict=True)
        (parsed,) = enc.parse_messages_from_completion_tokens(ids, None, strict=False)
        assert parsed.to_dict() == expected(message)
        return
    (parsed,) = enc.parse_messages_from_completion_tokens(ids, None, strict=True)
    assert parsed.to_dict() == expected(message)


def test_the_issue_example_is_refused(enc: Any) -> None:
    # `<|channel|> json<|message|>` reads back as channel "json" (lenient) or not
    # at all (strict), so an empty channel with a plain content type is refused.
    with pytest.raises(RenderError, match="empty channel followed by content type 'json'") as exc:
        enc.render(build(Role.USER, None, "python", "", "json"))
    assert exc.value.path == "channel"


def test_an_empty_channel_alone_renders_as_the_reference_and_reads_back_leniently(
    enc: Any,
) -> None:
    # An empty channel stays renderable because the reference renders it (byte
    # exactness wins; the reference corpus has 46 such messages); the strict
    # parser refuses it exactly as the reference's does, the lenient one reads it.
    for content_type in (None, "<|constrain|>json"):
        message = build(Role.ASSISTANT, None, "functions.f", "", content_type)
        ids = enc.render(message)
        with pytest.raises(ParseError, match="channel"):
            enc.parse_messages_from_completion_tokens(ids, None, strict=True)
        (parsed,) = enc.parse_messages_from_completion_tokens(ids, None, strict=False)
        assert parsed.to_dict() == expected(message)


@pytest.mark.parametrize(
    ("role", "name", "recipient", "channel", "content_type", "path", "says"),
    [
        (Role.ASSISTANT, None, "a b", None, None, "recipient", "recipient 'a b' cannot"),
        (Role.ASSISTANT, None, "", None, None, "recipient", "recipient '' cannot"),
        (Role.ASSISTANT, None, None, "final x", None, "channel", "channel 'final x'"),
        (Role.ASSISTANT, None, None, "x<y", None, "channel", "channel 'x<y'"),
        (Role.USER, "Bob Smith", None, None, None, "author.name", "author name 'Bob Smith'"),
        (Role.TOOL, "my tool", None, None, None, "author.name", "tool name 'my tool'"),
        (Role.TOOL, "assistant", None, None, None, "author.name", "read back as a role"),
        (Role.TOOL, "user:bob", None, None, None, "author.name", "read back as a role"),
        (Role.ASSISTANT, None, None, "final", "json", "content_type", "without a recipient"),
        (Role.ASSISTANT, None, "all", "final", "json", "content_type", "without a recipient"),
        (Role.ASSISTANT, None, "f", "c", "to=x", "content_type", "read back as a recipient"),
        (Role.ASSISTANT, None, "f", "c", "", "content_type", "content type '' cannot"),
        (Role.ASSISTANT, None, "f", "c", "<|constrain|>", "content_type", "constraint ''"),
        (Role.ASSISTANT, None, "f", "c", "<|constrain|> ", "content_type", "constraint ''"),
    ],
)
def test_unreadable_header_fields_are_refused(
    enc: Any,
    role: Role,
    name: Any,
    recipient: Any,
    channel: Any,
    content_type: Any,
    path: str,
    says: str,
) -> None:
    with pytest.raises(RenderError) as info:
        enc.render(build(role, name, recipient, channel, content_type))
    assert says in info.value.reason
    assert info.value.path == path


@pytest.mark.parametrize(
    ("role", "name", "recipient", "channel", "content_type"),
    [
        (Role.ASSISTANT, None, "functions.get_weather", "commentary", "<|constrain|>json"),
        (Role.ASSISTANT, None, "functions.get_weather", "commentary", "json"),
        (Role.ASSISTANT, None, "python", "analysis", "code"),
        (Role.ASSISTANT, None, None, "final", "<|constrain|>json"),
        (Role.ASSISTANT, None, "functions.f", "commentary", "<|constrain|> json"),
        (Role.TOOL, "functions.get_weather", "assistant", "commentary", None),
        (Role.TOOL, "functions.get_weather", None, None, None),
        (Role.TOOL, "tool", None, None, None),
        (Role.USER, "bob", None, None, None),
        (Role.USER, None, "all", None, None),
    ],
)
def test_usual_headers_still_render_and_read_back(
    enc: Any, role: Role, name: Any, recipient: Any, channel: Any, content_type: Any
) -> None:
    message = build(role, name, recipient, channel, content_type)
    assert round_trip(enc, message) == expected(message)
