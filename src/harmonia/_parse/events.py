"""What the parser consumes and produces: the encoding protocols, events and diagnostics.

Plain values with no behaviour, shared by the parser's modules, which import
this one and never the other way round; :mod:`harmonia._parse` re-exports the
public names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from .._content import TextContent
from .._message import Author, Message
from .._names import DiagnosticKind
from .header import MessageHeader

# -- what the parser needs from an encoding --------------------------------------


class TokenizerLike(Protocol):
    @property
    def token_bytes_table(self) -> list[bytes]: ...

    def encode_ordinary(self, text: str) -> list[int]: ...

    def encode(self, text: str, *, allowed_special: Literal["all"]) -> list[int]: ...


class EncodingLike(Protocol):
    """Anything with a ``tokenizer`` (a ``HarmonyEncoding``); the parser never imports it."""

    @property
    def tokenizer(self) -> TokenizerLike: ...


# -- diagnostics and events ------------------------------------------------------


RecoveryKind = DiagnosticKind
"""The parser's name for :class:`~harmonia._names.DiagnosticKind` (the public API's).

The parser makes the first eight kinds (tabled in :mod:`.recovery`); the others
belong to the layers that read a turn of model output.
"""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One recovery: what happened, where, and what was kept or dropped.

    ``token_index`` is the index (in :attr:`StreamableParser.tokens`) of the
    first token concerned; ``tokens`` are the raw token ids concerned (for
    invalid bytes: the tokens that carried them). ``kept`` and ``dropped`` are
    text, or ``None`` when nothing was kept or dropped.
    """

    kind: DiagnosticKind
    token_index: int
    description: str
    kept: str | None = None
    dropped: str | None = None
    tokens: tuple[int, ...] = ()

    def detail(self) -> str:
        """The description with what was kept and dropped (no kind, no position)."""
        out = self.description
        if self.kept is not None:
            out += f"; kept {self.kept!r}"
        if self.dropped is not None:
            out += f"; dropped {self.dropped!r}"
        return out

    def __str__(self) -> str:
        return f"{self.kind.value} at token {self.token_index}: {self.detail()}"


@dataclass(frozen=True, slots=True)
class MessageStarted:
    """A header is complete; content follows.

    ``token_index`` is the ``<|message|>`` token's (for a header recovered
    without one, the header's first token's).
    """

    header: MessageHeader
    token_index: int


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """New text of the current message (never half a character).

    ``token_index`` is the token that completed the text.
    """

    text: str
    token_index: int


# A frozen dataclass sets each field with object.__setattr__, a call per field;
# feed() makes a ContentDelta per token, so it fills the slots directly (what
# the generated __init__ does, without the calls it makes to get there).
_new_object = object.__new__
_set_text = vars(ContentDelta)["text"].__set__  # the slots' member descriptors
_set_token_index = vars(ContentDelta)["token_index"].__set__


@dataclass(frozen=True, slots=True)
class MessageDone:
    """A message is complete.

    ``stop_token`` is the token that ended it (``<|end|>``, ``<|return|>`` or
    ``<|call|>``; ``None`` when the stream ended, or a ``<|start|>`` cut a
    header short); the reference does not record it. ``token_index`` is the
    stop token's (at the end of the stream: the number of tokens). ``message``
    is a fresh object.
    """

    message: Message
    token_index: int
    stop_token: int | None


ParserEvent = MessageStarted | ContentDelta | MessageDone | Diagnostic


@dataclass(slots=True, eq=False)
class Output:
    """What a parser has produced so far, shared by the parser and its parts.

    The tokens seen (their positions are the events' indexes), the diagnostics,
    and the events of the current :meth:`~harmonia.StreamableParser.feed` call
    (``None`` outside one: then no event objects are made).
    """

    tokens: list[int] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    events: list[ParserEvent] | None = None

    def emit(self, event: ParserEvent) -> None:
        if self.events is not None:
            self.events.append(event)

    def diagnose(self, diagnostic: Diagnostic) -> None:
        self.diagnostics.append(diagnostic)
        if self.events is not None:
            self.events.append(diagnostic)


def make_message(header: MessageHeader, text: str) -> Message:
    """A fresh :class:`Message` with one text part."""
    return Message(
        Author(header.role, header.name),
        [TextContent(text)],
        header.channel,
        header.recipient,
        header.content_type,
    )
