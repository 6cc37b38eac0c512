"""Recipient and channel rules: who a message is addressed to, and where calls are made.

The rules of the format the turn layer reads output with, and that the OpenAI
conversions and constrained decoding write with: a function is called on
``commentary`` with ``<|constrain|>json`` arguments, a built-in tool
(``browser.*``, ``python``) normally on ``analysis`` with ``code``; a lone
header word is a recipient only where the model writes calls.
"""

from __future__ import annotations

from typing import Final

from .._names import ANALYSIS, BROWSER, CODE, COMMENTARY, CONSTRAIN_JSON, FUNCTIONS, PYTHON

#: Recipients that address a person or the whole conversation, never a tool.
NOT_RECIPIENTS: Final = frozenset({"all", "assistant", "user"})

#: Lone header words that are content types, not recipients (``<|channel|>analysis code``).
CONTENT_TYPE_WORDS: Final = frozenset(
    {"json", "code", "text", "markdown", "md", "html", "yaml", "xml"}
)

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
