"""Parsing completions: a sans-IO streaming parser, and batch parsing on top of it.

Theory of operation
===================

A completion is a sequence of messages, ``<|start|>{header}<|message|>{content}``
ended by a stop token (``<|end|>``, ``<|return|>``, ``<|call|>``) or by the end
of the stream. The parser is a small state machine over *tokens*, in the style
of h11's ``_state.py``: three states, a handful of input classes, and one
transition table saying, for each (state, input), which action runs and which
state follows. The parser does no I/O: the caller feeds it tokens
(:meth:`StreamableParser.process`) and tells it when the stream ended
(:meth:`StreamableParser.process_eos`).

States (``StreamState``)::

    EXPECT_START --<|start|>--> HEADER --<|message|>--> CONTENT --stop/EOS--> EXPECT_START

* EXPECT_START: between messages. Only ``<|start|>`` is valid.
* HEADER: header tokens are collected; at ``<|message|>`` they are decoded and
  read as one string (:mod:`._header`), because that is how the reference does
  it and a header is tiny. A parser made with a role (the prompt ended in
  ``<|start|>assistant``) starts here, with the role already known.
* CONTENT: every token except a stop token is content - including ``<|start|>``
  and the other special tokens, whose text becomes part of the message, as in
  the reference. Bytes are decoded incrementally: a delta never holds half a
  character, and a character split across tokens appears with its last byte.

Inputs: ``<|start|>``, ``<|message|>``, a stop token, ``<|channel|>``, any
other token, and end-of-stream (EOS). The strict table (:data:`STRICT`) is the
reference's machine (reference-behaviour.md section 6.2). The lenient table
(``strict=False``) overrides a few cells (:data:`LENIENT`) so that no input
raises. An action runs first and the table's next state is entered when it
returns; an action that raises leaves the state as the reference leaves it
(unchanged, except a refused header, which leaves EXPECT_START).

This module holds the states, the tables and the strict actions; the other
actions are methods :class:`StreamableParser` inherits, one module per job, each
importing only the ones before it and never this one::

    _parse_events (values) <- _parse_base (fields, header cache)
        <- _parse_content (CONTENT) <- _recovery (lenient) <- _parser

Batch parsing (:func:`parse_tokens`) is a loop over :meth:`process` plus
:meth:`process_eos`: batch and streaming cannot disagree.

Two ways to consume a stream: read the reference's properties after each
token (``current_channel``, ``last_content_delta``, ...), or call
:meth:`StreamableParser.feed`, which returns events - :class:`MessageStarted`
(with the header), :class:`ContentDelta`, :class:`MessageDone` and
:class:`Diagnostic` - so a server does not have to diff properties. The deltas
of a message's events always join to its final text.

Lenient recoveries (``strict=False``)
-------------------------------------

Lenient mode never raises and never silently loses text: each recovery appends a
:class:`Diagnostic` (kind, token index, what was kept, what was dropped, the raw
tokens) to :attr:`StreamableParser.diagnostics`. Where the reference's own
``strict=False`` mode returns a sensible answer, lenient mode returns the same.

The recoveries, one per :class:`RecoveryKind`, are tabled in :mod:`._recovery`,
which implements them.

Strict mode and the reference
-----------------------------

Strict mode raises :class:`ParseError` (a ``HarmonyError``, with the reference's
message, plus the state, token id, token text and index) where the reference
raises, and otherwise gives the reference's messages and per-token properties,
except:

* headers the reference cannot read back from its own renderer, or misreads
  (:mod:`._header`, fixes F1-F5: ``<|constrain|> json``, a structured final
  answer ``<|channel|>final <|constrain|>json``, ``role:name`` authors, tool
  messages without recipient, an empty channel);
* token ids below 0 or from 2**32 (an ``OverflowError`` in the reference's
  binding) behave like other unknown ids.

Strict mode records diagnostics only for the repairs the reference makes
silently: invalid-utf8 and invalid-token (an unknown id in content turns the
rest of the message into one U+FFFD, as in the reference).

After bytes that are not UTF-8, strict mode's ``last_content_delta`` is the
reference's, which holds valid text back until the next token (and never shows
what is held when the message ends); the events of :meth:`~StreamableParser.feed`
carry that text when the message ends. Lenient mode decodes everything it can at
once, so its deltas never lag.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

from ._enums import Role, StreamState
from ._errors import ParseError
from ._header import HeaderError, MessageHeader
from ._message import Message
from ._parse_base import header_strict
from ._parse_events import (
    ContentDelta,
    Diagnostic,
    MessageDone,
    MessageStarted,
    ParserEvent,
    RecoveryKind,
    make_message,
)
from ._parse_events import EncodingLike as EncodingLike
from ._parse_events import TokenizerLike as TokenizerLike
from ._recovery import LenientActions
from ._tokenizer import special_tokens as st

__all__ = [
    "ContentDelta",
    "Diagnostic",
    "MessageDone",
    "MessageHeader",
    "MessageStarted",
    "ParseResult",
    "ParserEvent",
    "RecoveryKind",
    "StreamableParser",
    "parse_completion",
    "parse_text",
    "parse_tokens",
]

# -- the transition table ----------------------------------------------------------

_EXPECT_START: Final = 0
_HEADER: Final = 1
_CONTENT: Final = 2
_STATES: Final = (StreamState.EXPECT_START, StreamState.HEADER, StreamState.CONTENT)


class Input(enum.Enum):
    """The input classes the transition table distinguishes."""

    START = "<|start|>"
    MESSAGE = "<|message|>"
    STOP = "stop token"
    CHANNEL = "<|channel|>"
    OTHER = "other token"
    EOS = "end of stream"


_INPUT_TOKENS: Final[dict[Input, tuple[int, ...]]] = {
    Input.START: (st.START,),
    Input.MESSAGE: (st.MESSAGE,),
    Input.STOP: (st.RETURN, st.END, st.CALL),
    Input.CHANNEL: (st.CHANNEL,),
}

Transition = tuple[str, StreamState]  # (action, next state)
_ES, _HD, _CT = StreamState.EXPECT_START, StreamState.HEADER, StreamState.CONTENT

#: The reference's machine. Cells left out fall back to the state's OTHER cell.
STRICT: Final[dict[tuple[StreamState, Input], Transition]] = {
    (_ES, Input.START): ("begin_header", _HD),
    (_ES, Input.OTHER): ("reject_token", _ES),
    (_ES, Input.EOS): ("nothing", _ES),
    (_HD, Input.MESSAGE): ("end_header", _CT),  # a refused header leaves EXPECT_START
    (_HD, Input.OTHER): ("add_header_token", _HD),  # stop tokens, <|start|>: part of the header
    (_HD, Input.EOS): ("reject_eos_in_header", _HD),
    (_CT, Input.STOP): ("finish_message", _ES),
    (_CT, Input.OTHER): ("add_content", _CT),  # <|start|>, <|message|>...: text
    (_CT, Input.EOS): ("finish_message", _ES),
}

#: ``strict=False`` overrides.
LENIENT: Final[dict[tuple[StreamState, Input], Transition]] = {
    (_ES, Input.CHANNEL): ("implicit_start", _HD),
    (_ES, Input.OTHER): ("skip_junk", _ES),
    (_ES, Input.EOS): ("flush_junk", _ES),
    (_HD, Input.MESSAGE): ("end_header_leniently", _CT),
    (_HD, Input.STOP): ("header_without_message", _ES),
    (_HD, Input.EOS): ("header_without_message", _ES),
}

_Action = Callable[["StreamableParser", "int | None"], None]
_Cell = tuple[_Action, int]
# Per state: (cells for the special tokens that have one, the OTHER cell, the EOS cell).
_Row = tuple[dict[int, _Cell], _Cell, _Cell]


def _compile(table: dict[tuple[StreamState, Input], Transition]) -> tuple[_Row, ...]:
    """Turn a table into per-state rows of (function, next state index)."""
    rows = []
    for state in _STATES:

        def cell(inp: Input, state: StreamState = state) -> _Cell:
            action, nxt = table.get((state, inp)) or table[(state, Input.OTHER)]
            return getattr(StreamableParser, "_" + action), _STATES.index(nxt)

        specials = {}
        for inp, ids in _INPUT_TOKENS.items():
            if (state, inp) in table:
                for token in ids:
                    specials[token] = cell(inp)
        rows.append((specials, cell(Input.OTHER), cell(Input.EOS)))
    return tuple(rows)


# -- the parser ----------------------------------------------------------------------


class StreamableParser(LenientActions):
    """Incremental harmony parser (the reference's API, plus events and diagnostics).

    ``role`` is the role of the first message when the prompt already ended with
    ``<|start|>{role}`` (the completion then starts inside its header); ``None``
    when the completion starts with ``<|start|>``. ``strict=False`` enables the
    recoveries tabled in :mod:`._recovery`.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> p = StreamableParser(enc, Role.ASSISTANT)
    >>> for t in enc.encode("<|channel|>final<|message|>Hi!", allowed_special="all"):
    ...     _ = p.process(t)
    >>> p.current_channel, p.current_content
    ('final', 'Hi!')
    >>> [type(e).__name__ for e in p.feed(200002)]
    ['MessageDone']
    """

    __slots__ = ("_rows", "_s", "_tokenizer")

    def __init__(self, encoding: EncodingLike, role: Role | None, *, strict: bool = True) -> None:
        if role is not None and not isinstance(role, Role):
            role = Role(role)
        self._tokenizer = encoding.tokenizer
        self._table = self._tokenizer.token_bytes_table
        self._strict = bool(strict)
        self._rows = _STRICT_ROWS if self._strict else _LENIENT_ROWS
        self._tokens = []
        self._next_role = role
        self._default_role = role or Role.ASSISTANT
        self._s = _HEADER if role is not None else _EXPECT_START
        self._header_tokens = []
        self._header_first = 0
        self._implicit = False
        self._header = None
        self._pieces = []
        self._joined = ""
        self._joined_n = 0
        self._pending = b""
        self._swallow = False
        self._delta = None
        self._messages = []
        self._diagnostics = []
        self._junk = []
        self._junk_start = 0
        self._events = None

    # -- feeding -------------------------------------------------------------------

    def process(self, token: int) -> StreamableParser:
        """Feed one token. Strict mode raises :class:`ParseError` where the reference raises."""
        self._tokens.append(token)
        specials, other, _ = self._rows[self._s]
        action, nxt = specials.get(token) or other
        action(self, token)
        self._s = nxt
        return self

    def process_eos(self) -> StreamableParser:
        """Signal the end of the stream: a message in progress is completed."""
        action, nxt = self._rows[self._s][2]
        action(self, None)
        self._s = nxt
        return self

    def feed(self, token: int) -> list[ParserEvent]:
        """Like :meth:`process`, returning what happened as events."""
        events: list[ParserEvent] = []
        self._events = events
        try:
            self.process(token)
        finally:
            self._events = None
        return events

    def feed_eos(self) -> list[ParserEvent]:
        """Like :meth:`process_eos`, returning what happened as events."""
        events: list[ParserEvent] = []
        self._events = events
        try:
            self.process_eos()
        finally:
            self._events = None
        return events

    # -- the reference's properties ----------------------------------------------------

    @property
    def state(self) -> StreamState:
        return _STATES[self._s]

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def current_role(self) -> Role | None:
        """The message's role in content; otherwise the role given for the first message."""
        if self._s == _CONTENT and self._header is not None:
            return self._header.role
        return self._next_role

    @property
    def current_channel(self) -> str | None:
        return self._header.channel if self._s == _CONTENT and self._header else None

    @property
    def current_recipient(self) -> str | None:
        return self._header.recipient if self._s == _CONTENT and self._header else None

    @property
    def current_content_type(self) -> str | None:
        return self._header.content_type if self._s == _CONTENT and self._header else None

    @property
    def current_content(self) -> str:
        """The text of the message being streamed so far (``''`` outside content)."""
        if self._s != _CONTENT:
            return ""
        return self._content_text()

    @property
    def last_content_delta(self) -> str | None:
        """The text the last token added (``None`` if it added none, e.g. half a character)."""
        return self._delta

    @property
    def messages(self) -> list[Message]:
        """The completed messages, as fresh objects."""
        return [make_message(h, text) for h, text in self._messages]

    @property
    def tokens(self) -> list[int]:
        """Every token passed to :meth:`process` (a copy)."""
        return list(self._tokens)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The recoveries so far (a run of skipped tokens is reported when it ends)."""
        return tuple(self._diagnostics)

    @property
    def state_data(self) -> dict[str, object]:
        """The reference's ``state_data`` dict."""
        if self._s == _EXPECT_START:
            return {"state": "ExpectStart"}
        if self._s == _HEADER:
            return {"state": "Header", "header_tokens": list(self._header_tokens)}
        assert self._header is not None
        encode = self._tokenizer.encode_ordinary
        content_tokens: list[int] = []
        for piece in self._pieces:
            content_tokens += encode(piece)
        return {
            "state": "Content",
            "header": self._header.to_dict(),
            "content_tokens": content_tokens,
        }

    def __repr__(self) -> str:
        return (
            f"<StreamableParser state={self.state.value} strict={self._strict} "
            f"tokens={len(self._tokens)} messages={len(self._messages)}>"
        )

    # -- helpers -------------------------------------------------------------------------

    def _token_text(self, token: int) -> str | None:
        if 0 <= token < len(self._table):
            return self._table[token].decode("utf-8", "replace")
        return None

    # -- actions: between messages (lenient ones in _recovery, content in _parse_content) --

    def _nothing(self, token: int | None) -> None:
        pass

    def _reject_token(self, token: int) -> None:
        raise ParseError(
            f"Unexpected token {token} while expecting start token {st.START}",
            state=StreamState.EXPECT_START.value,
            token=token,
            token_text=self._token_text(token),
            token_index=self._index(),
        )

    def _begin_header(self, token: int | None) -> None:
        if self._junk:
            self._flush_junk(token)
        self._header_tokens = []
        self._header_first = len(self._tokens)
        self._implicit = False

    # -- actions: header ---------------------------------------------------------------------

    def _add_header_token(self, token: int) -> None:
        self._header_tokens.append(token)

    def _reject_eos_in_header(self, token: None) -> None:
        raise ParseError(
            "Unexpected EOS while waiting for message header to complete",
            state=StreamState.HEADER.value,
            token=None,
            token_text=None,
            token_index=len(self._tokens),
        )

    def _end_header(self, token: int) -> None:
        # As in the reference: a refused header leaves EXPECT_START, the header
        # discarded, and the role given for the first message still pending.
        self._s = _EXPECT_START
        tokens = self._header_tokens
        self._header_tokens = []
        try:
            header = header_strict(self._table, tokens, self._next_role)
        except HeaderError as exc:
            raise ParseError(
                exc.reason,
                state=StreamState.HEADER.value,
                token=token,
                token_text="<|message|>",
                token_index=self._index(),
            ) from None
        self._next_role = None
        self._begin_content(header)


_STRICT_ROWS: Final = _compile(STRICT)
_LENIENT_ROWS: Final = _compile({**STRICT, **LENIENT})

# -- batch entry points ---------------------------------------------------------------------


class ParseResult(NamedTuple):
    """Messages and the recoveries made while parsing them."""

    messages: list[Message]
    diagnostics: tuple[Diagnostic, ...]


def parse_completion(
    encoding: EncodingLike,
    completion: Iterable[int] | str,
    role: Role | None = None,
    *,
    strict: bool = True,
) -> ParseResult:
    """Parse a whole completion (token ids, or text with special tokens spelled out).

    A loop over :class:`StreamableParser`, then end of stream.
    """
    if isinstance(completion, str):
        completion = encoding.tokenizer.encode(completion, allowed_special="all")
    parser = StreamableParser(encoding, role, strict=strict)
    process = parser.process
    for token in completion:
        process(token)
    parser.process_eos()
    return ParseResult(parser.messages, parser.diagnostics)


def parse_tokens(
    encoding: EncodingLike, tokens: Iterable[int], role: Role | None = None, *, strict: bool = True
) -> list[Message]:
    """``parse_messages_from_completion_tokens``: the messages of a completion."""
    return parse_completion(encoding, tokens, role, strict=strict).messages


def parse_text(
    encoding: EncodingLike, text: str, role: Role | None = None, *, strict: bool = True
) -> list[Message]:
    """Parse a completion given as text, special tokens spelled out (``<|start|>``...).

    Some servers return completions as text; every special-token spelling in it
    is read as that special token.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> [m.channel for m in parse_text(enc, "<|channel|>analysis<|message|>hm<|end|>"
    ...                                     "<|start|>assistant<|channel|>final<|message|>4",
    ...                                     Role.ASSISTANT)]
    ['analysis', 'final']
    """
    return parse_completion(encoding, text, role, strict=strict).messages
