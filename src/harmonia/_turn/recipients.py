"""Recipient and channel rules: who a message is addressed to, and where calls are made.

The rules of the format the turn layer reads output with, and that the OpenAI
conversions and constrained decoding write with: a function is called on
``commentary`` with ``<|constrain|>json`` arguments, a built-in tool
(``browser.*``, ``python``) normally on ``analysis`` with ``code``; a lone
header word is a recipient only where the model writes calls.

:func:`classify` is the one reading of a message header: which item it is
(reasoning, text, a call) and which tool a call addresses. The assembler (what
API clients are streamed), the agent loop, tool dispatch (``is_tool_call``)
and constrained decoding's key rule all use it, so what a client is shown and
what a server executes cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from .._enums import Role
from .._errors import ModelOutputError
from .._message import Message
from .._names import (
    ANALYSIS,
    BROWSER,
    CODE,
    COMMENTARY,
    CONSTRAIN,
    CONSTRAIN_JSON,
    CONTENT_TYPE_WORDS,
    FINAL,
    FUNCTIONS,
    NOT_RECIPIENTS,
    PYTHON,
    DiagnosticKind,
)

ItemKind = Literal["reasoning", "text", "call"]

#: The channels a call may be made on: functions on ``commentary`` (the system
#: message says so), built-in tools normally on ``analysis``, sometimes on
#: ``commentary`` (the harmony guide). The first is the one calls are rendered on.
FUNCTION_CALL_CHANNELS: Final = (COMMENTARY,)
BUILTIN_CALL_CHANNELS: Final = (ANALYSIS, COMMENTARY)


def is_builtin_name(name: str) -> bool:
    """True for names of gpt-oss's built-in tools: ``python``, ``browser.<action>``.

    >>> is_builtin_name("browser.search"), is_builtin_name("python"), is_builtin_name("f")
    (True, True, False)
    """
    return name == PYTHON or name.startswith(BROWSER + ".")


def api_name(recipient: str) -> str:
    """The API name of a harmony recipient (``functions.f`` -> ``f``; built-ins kept).

    >>> api_name("functions.get_weather"), api_name("browser.open")
    ('get_weather', 'browser.open')
    """
    prefix = FUNCTIONS + "."
    return recipient[len(prefix) :] if recipient.startswith(prefix) else recipient


def call_header(recipient: str) -> tuple[str, str]:
    """(channel, content type) a call to ``recipient`` is rendered with.

    >>> call_header("functions.f"), call_header("python")
    (('commentary', '<|constrain|>json'), ('analysis', 'code'))
    """
    if recipient.startswith(FUNCTIONS + "."):
        return FUNCTION_CALL_CHANNELS[0], CONSTRAIN_JSON
    return BUILTIN_CALL_CHANNELS[0], CODE


def is_content_type_word(recipient: str, channel: str | None) -> bool:
    """Whether a recipient the parser read is really a content type.

    The reference reads a lone header word as a recipient. Without a namespace
    (``functions.f``, ``browser.search``) and other than ``python``, it is a
    content type outside the channels calls are made on (``<|channel|>final
    json``), and on them when it is a content-type word (``json``, ``code``,
    ...). Any other bare word on those channels is a call to that name (the
    model sometimes drops ``functions.``).

    >>> is_content_type_word("json", "final"), is_content_type_word("get_time", "commentary")
    (True, False)
    """
    if "." in recipient or recipient == PYTHON:
        return False
    return channel not in BUILTIN_CALL_CHANNELS or recipient in CONTENT_TYPE_WORDS


def clean_recipient(recipient: str) -> str:
    """The recipient without a leading ``to=`` or anything glued after it.

    >>> clean_recipient("to=functions.f <|constrain|>json")
    'functions.f'
    """
    words = recipient.strip().removeprefix("to=").split(CONSTRAIN, 1)[0].split()
    return words[0] if words else ""


@dataclass(frozen=True, slots=True)
class Reading:
    """What a message header says: the item it makes, and the tool a call addresses.

    ``recipient`` is set for a call only (cleaned of ``to=`` and glued
    content types); ``content_type`` includes a content-type word the
    reference read as a recipient; ``phase`` is ``commentary`` for a preamble,
    ``final`` otherwise; ``notes`` are the repairs a lenient reading made.
    """

    kind: ItemKind
    channel: str | None
    recipient: str | None
    content_type: str | None
    phase: str = FINAL
    notes: tuple[tuple[DiagnosticKind, str], ...] = ()


def classify(
    role: Role,
    channel: str | None,
    recipient: str | None,
    content_type: str | None = None,
    *,
    strict: bool = False,
) -> Reading:
    """Read a header's fields (a :class:`~harmonia.MessageHeader`'s or a message's).

    The rules, in order: special-token text in the recipient or the channel
    makes that field unusable (lenient: ignored, with a ``header-text`` note;
    ``strict=True``: :class:`~harmonia.ModelOutputError`); a recipient that
    addresses a person or role (``all``, ``user``...) is none; a message from
    another role is reasoning (never shown, never run); a lone content-type
    word (:func:`is_content_type_word`) is a content type; any other recipient
    makes a call; otherwise ``analysis`` is reasoning, ``commentary`` a
    preamble and anything else the answer. Both modes read every other header
    alike.

    >>> classify(Role.ASSISTANT, "commentary", "functions.f", "<|constrain|>json").kind
    'call'
    >>> r = classify(Role.ASSISTANT, "commentary", "markdown")
    >>> r.kind, r.phase, r.content_type
    ('text', 'commentary', 'markdown')
    """
    notes: list[tuple[DiagnosticKind, str]] = []
    name = clean_recipient(recipient) if recipient else ""
    for field, value in (("recipient", name), ("channel", channel)):
        if value and "<|" in value:
            why = f"{field} {value!r} ignored"
            if strict:
                raise ModelOutputError(f"special-token text in a header field: {why}")
            notes.append((DiagnosticKind.HEADER_TEXT, why))
            if field == "recipient":
                name = ""
            else:
                channel = None
    if name in NOT_RECIPIENTS:
        name = ""
    if role is not Role.ASSISTANT:
        notes.append((DiagnosticKind.FOREIGN_AUTHOR, f"a {role.value} message in the output"))
        return Reading("reasoning", channel, None, content_type, FINAL, tuple(notes))
    if name and is_content_type_word(name, channel):
        # Then the channel decides, as for any message without a recipient.
        notes.append((DiagnosticKind.CONTENT_TYPE_AS_RECIPIENT, f"{name!r} read as a content type"))
        content_type, name = name, ""
    elif name:
        return Reading("call", channel, name, content_type, FINAL, tuple(notes))
    if channel == ANALYSIS:
        return Reading("reasoning", channel, None, content_type, FINAL, tuple(notes))
    if channel == COMMENTARY:
        return Reading("text", channel, None, content_type, COMMENTARY, tuple(notes))
    if channel not in (None, FINAL):
        notes.append((DiagnosticKind.UNKNOWN_CHANNEL, f"channel {channel!r} read as final"))
    return Reading("text", channel, None, content_type, FINAL, tuple(notes))


def is_call(message: Message) -> bool:
    """Whether ``message`` calls a tool: :func:`classify` of its header as written.

    A message is read as its fields say, with no channel filled in: a bare
    ``get_weather`` with no channel is a content type (as the parser reads
    ``<|start|>assistant to=get_weather<|message|>``), ``to=user`` addresses no
    tool, ``functions.f`` is a call on any channel.

    >>> m = Message.from_role_and_content(Role.ASSISTANT, "{}")
    >>> is_call(m.with_recipient("functions.f")), is_call(m.with_recipient("get_weather"))
    (True, False)
    >>> is_call(m.with_channel("commentary").with_recipient("get_weather"))
    True
    """
    if message.recipient is None:
        return False  # the common case, and no reading can make it a call
    reading = classify(message.author.role, message.channel, message.recipient)
    return reading.kind == "call"
