"""The harmony vocabulary, named once.

Channels, tool namespaces, content types and the ``<|constrain|>`` marker are
words of the format; the renderer, the parser, the turn layer, the OpenAI
conversions, constrained decoding and the tools all spell them from here. The
modes users choose between are ``Literal`` types, so a type checker catches a
misspelt mode and the CLI derives its ``choices`` from the same tuple.
"""

from __future__ import annotations

import enum
import re
from typing import Final, Literal, get_args

# Channels the format defines (the system message's ``# Valid channels`` line).
ANALYSIS: Final = "analysis"
COMMENTARY: Final = "commentary"
FINAL: Final = "final"
CHANNELS: Final = (ANALYSIS, COMMENTARY, FINAL)

# Tool namespaces: ``functions`` in the developer message, the built-ins in the system message.
FUNCTIONS: Final = "functions"
BROWSER: Final = "browser"
PYTHON: Final = "python"
BUILTIN_NAMESPACES: Final = (BROWSER, PYTHON)

# A tool's name as a message author: ``namespace.name`` (ASCII letters, digits,
# ``_`` and ``-`` in each part), or a built-in namespace alone. The renderer
# refuses other tool author names and the strict parser reads no other word
# as one, so what is rendered always reads back, and junk never becomes a tool.
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+")


def is_tool_name(word: str) -> bool:
    """Whether ``word`` can name a tool as a message's author.

    >>> [is_tool_name(w) for w in ("functions.get_weather", "python", "assistantfinal")]
    [True, True, False]
    """
    return word in BUILTIN_NAMESPACES or _TOOL_NAME.fullmatch(word) is not None


# A tool's reply is addressed back to the assistant.
ASSISTANT: Final = "assistant"

#: Header words that address a person, a role or the whole conversation: never a tool.
NOT_RECIPIENTS: Final = frozenset({"all", ASSISTANT, "user", "system", "developer"})

# Content types. ``<|constrain|>`` is a special token that may open a content
# type (``<|constrain|>json``): the only special token inside a header.
CONSTRAIN: Final = "<|constrain|>"
JSON: Final = "json"
CODE: Final = "code"
CONSTRAIN_JSON: Final = CONSTRAIN + JSON
#: Lone header words that are content types, not recipients (``<|channel|>analysis code``).
CONTENT_TYPE_WORDS: Final = frozenset({JSON, CODE, "text", "markdown", "md", "html", "yaml", "xml"})

TypeScriptMode = Literal["reference", "corrected"]
"""How tool schemas become TypeScript: byte-exact with the reference, or corrected."""
TYPESCRIPT_MODES: Final[tuple[TypeScriptMode, ...]] = get_args(TypeScriptMode)

CotPolicyName = Literal["reference", "guide", "keep_all", "hf"]
"""Which earlier analysis messages a rendering drops (see ``harmonia.COT_POLICIES``)."""
COT_POLICY_NAMES: Final[tuple[CotPolicyName, ...]] = get_args(CotPolicyName)
#: The policy of the agent, the server and the OpenAI conversions: the harmony guide's
#: (a bare render's default stays the reference's, for byte-exactness).
DEFAULT_COT_POLICY: Final[CotPolicyName] = "guide"

#: The sampling defaults (gpt-oss is meant to be sampled at temperature 1.0, top-p off):
#: the engines' ``SamplingParams`` and what a Responses object reports when a request
#: sets neither.
DEFAULT_TEMPERATURE: Final = 1.0
DEFAULT_TOP_P: Final = 1.0

EngineName = Literal["auto", "python", "quicktok", "tiktoken"]
"""The BPE engines the tokenizer can run on."""
ENGINE_NAMES: Final[tuple[EngineName, ...]] = get_args(EngineName)


class WordEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` is its value, a word of JSON output and logs.

    (``str()`` of a plain str-mixin enum is ``Kind.MEMBER``, and f-strings follow
    it from Python 3.12.)
    """

    def __str__(self) -> str:
        return str(self.value)


class DiagnosticKind(WordEnum):
    """What a diagnostic reports, for the parser's recoveries and the turn layer alike.

    The values are stable strings (they appear in JSON output and logs).
    """

    # The parser's lenient recoveries.
    JUNK_BETWEEN_MESSAGES = "junk-between-messages"
    MISSING_START = "missing-start"
    REPEATED_START = "repeated-start"
    MISSING_MESSAGE = "missing-message"
    TRUNCATED = "truncated"
    HEADER_REPAIRED = "header-repaired"
    INVALID_UTF8 = "invalid-utf8"
    INVALID_TOKEN = "invalid-token"
    # Reading a turn of model output into items.
    MISSING_END = "missing-end"
    SPECIAL_TOKEN_IN_CONTENT = "special-token-in-content"
    HEADER_TEXT = "header-text"
    FOREIGN_AUTHOR = "foreign-author"
    CONTENT_TYPE_AS_RECIPIENT = "content-type-as-recipient"
    UNKNOWN_CHANNEL = "unknown-channel"
    DELTA_MISMATCH = "delta-mismatch"
