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

=======================  =========================================================
kind                     situation and recovery
=======================  =========================================================
junk-between-messages    tokens where ``<|start|>`` belongs (text after a stop
                         token, a second stop token as in ``<|end|><|return|>``,
                         ``<|endoftext|>``): skipped up to the next ``<|start|>``;
                         one diagnostic per run, with the dropped text.
missing-start            ``<|channel|>`` where ``<|start|>`` belongs: a message is
                         begun with the parser's role (or assistant), as if
                         ``<|start|>assistant`` had been written.
repeated-start           ``<|start|>`` at the beginning of a header (the completion
                         repeats the prompt's ``<|start|>assistant``, or
                         ``<|start|>`` is doubled): ignored; the header is read
                         from there.
missing-message          a header without ``<|message|>``. The first header of a
                         parser given a role, ended by a stop token, becomes a
                         message whose text is its words, as the reference does
                         for a refusal written without a header (``I must
                         refuse<|end|>``); any other header a stop token ends is
                         dropped, as the reference drops it, with its text in the
                         diagnostic. A header cut short by ``<|start|>`` becomes a
                         message when it has words (the reference fails there).
truncated                the stream ended inside a header: read as missing-message.
                         (A stream ending inside content is not a recovery: the
                         partial message is returned in both modes.)
header-repaired          a header the strict reader refuses or misreads: extra
                         words, duplicated ``to=``, an unknown role, stray special
                         tokens, gpt-oss-20b's stray ``<|channel|>commentary``
                         before ``<|channel|>analysis`` (the last channel wins).
                         The dropped words are listed.
invalid-utf8             bytes that are not UTF-8, in content or header: U+FFFD
                         in the text, raw tokens in the diagnostic.
invalid-token            a token id outside the vocabulary (>= 201089 or < 0):
                         U+FFFD in content (the reference replaces the whole rest
                         of the message; strict mode still does), skipped between
                         messages.
=======================  =========================================================

A ``<|start|>`` inside a header is dealt with when the header ends: if strict
mode can read the header, lenient mode reads it the same way; the first header
of a parser given a role, ended by a stop token, is the reference's own recovery
(the whole header is the text, ``<|start|>`` included).

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
from codecs import utf_8_decode
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, Protocol

from . import _special_tokens as st
from ._content import TextContent
from ._enums import Role, StreamState
from ._errors import ParseError
from ._header import (
    HeaderError,
    MessageHeader,
    header_as_text,
    is_nonsense,
    parse_header,
    recover_header,
)
from ._message import Author, Message

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


class RecoveryKind(str, enum.Enum):
    """What a :class:`Diagnostic` reports (see the module's table)."""

    JUNK_BETWEEN_MESSAGES = "junk-between-messages"
    MISSING_START = "missing-start"
    REPEATED_START = "repeated-start"
    MISSING_MESSAGE = "missing-message"
    TRUNCATED = "truncated"
    HEADER_REPAIRED = "header-repaired"
    INVALID_UTF8 = "invalid-utf8"
    INVALID_TOKEN = "invalid-token"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One recovery: what happened, where, and what was kept or dropped.

    ``token_index`` is the index (in :attr:`StreamableParser.tokens`) of the
    first token concerned; ``tokens`` are the raw token ids concerned (for
    invalid bytes: the tokens that carried them). ``kept`` and ``dropped`` are
    text, or ``None`` when nothing was kept or dropped.
    """

    kind: RecoveryKind
    token_index: int
    description: str
    kept: str | None = None
    dropped: str | None = None
    tokens: tuple[int, ...] = ()

    def __str__(self) -> str:
        out = f"{self.kind.value} at token {self.token_index}: {self.description}"
        if self.kept is not None:
            out += f"; kept {self.kept!r}"
        if self.dropped is not None:
            out += f"; dropped {self.dropped!r}"
        return out


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


# -- header decoding and the header cache --------------------------------------------

_REPLACEMENT: Final = "\ufffd"
_SPECIAL_NAME: Final = {t: st.SPECIAL_TOKEN_TEXT[t] for t in (st.START, st.RETURN, st.END, st.CALL)}
_HEADER_CACHE: dict[tuple[tuple[int, ...], Role | None], MessageHeader | str] = {}
_HEADER_CACHE_LIMIT: Final = 4096


def _header_strict(table: list[bytes], tokens: list[int], role: Role | None) -> MessageHeader:
    """The strict reading of header tokens (cached: headers repeat). Raises HeaderError."""
    key = (tuple(tokens), role)
    hit = _HEADER_CACHE.get(key)
    if hit is None:
        try:
            text = _join_bytes(table, tokens).decode()
        except (IndexError, TypeError, UnicodeDecodeError):
            hit = "could not decode header"
        else:
            try:
                hit = parse_header(text, role)
            except HeaderError as exc:
                hit = exc.reason
        if len(_HEADER_CACHE) >= _HEADER_CACHE_LIMIT:
            _HEADER_CACHE.clear()
        _HEADER_CACHE[key] = hit
    if isinstance(hit, str):
        raise HeaderError(hit)
    return hit


def _join_bytes(table: list[bytes], tokens: list[int]) -> bytes:
    if tokens and min(tokens) < 0:
        raise IndexError("negative token id")
    return b"".join([table[t] for t in tokens])


def _lossy_text(table: list[bytes], tokens: Iterable[int]) -> tuple[str, bool]:
    """Decode with U+FFFD for bad bytes and unknown ids; also say whether any was bad."""
    parts: list[bytes] = []
    bad = False
    for t in tokens:
        if 0 <= t < len(table):
            parts.append(table[t])
        else:
            parts.append(b"\xff")  # never valid UTF-8: one U+FFFD
            bad = True
    data = b"".join(parts)
    try:
        return data.decode(), bad
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


# -- the parser ----------------------------------------------------------------------


class StreamableParser:
    """Incremental harmony parser (the reference's API, plus events and diagnostics).

    ``role`` is the role of the first message when the prompt already ended with
    ``<|start|>{role}`` (the completion then starts inside its header); ``None``
    when the completion starts with ``<|start|>``. ``strict=False`` enables the
    recoveries in the module's table.

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

    __slots__ = (
        "_default_role",
        "_delta",
        "_diagnostics",
        "_events",
        "_header",
        "_header_first",
        "_header_tokens",
        "_implicit",
        "_joined",
        "_joined_n",
        "_junk",
        "_junk_start",
        "_messages",
        "_next_role",
        "_pending",
        "_pieces",
        "_rows",
        "_s",
        "_strict",
        "_swallow",
        "_table",
        "_tokenizer",
        "_tokens",
    )

    def __init__(self, encoding: EncodingLike, role: Role | None, *, strict: bool = True) -> None:
        if role is not None and not isinstance(role, Role):
            role = Role(role)
        self._tokenizer = encoding.tokenizer
        self._table = self._tokenizer.token_bytes_table
        self._strict = bool(strict)
        self._rows = _STRICT_ROWS if self._strict else _LENIENT_ROWS
        self._tokens: list[int] = []
        self._next_role = role
        self._default_role = role or Role.ASSISTANT
        self._s = _HEADER if role is not None else _EXPECT_START
        self._header_tokens: list[int] = []
        self._header_first = 0
        self._implicit = False
        self._header: MessageHeader | None = None
        self._pieces: list[str] = []
        self._joined = ""
        self._joined_n = 0
        self._pending = b""
        self._swallow = False
        self._delta: str | None = None
        self._messages: list[tuple[MessageHeader, str]] = []
        self._diagnostics: list[Diagnostic] = []
        self._junk: list[int] = []
        self._junk_start = 0
        self._events: list[ParserEvent] | None = None

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
        return [_message(h, text) for h, text in self._messages]

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

    def _index(self) -> int:
        return len(self._tokens) - 1

    def _emit(self, event: ParserEvent) -> None:
        if self._events is not None:
            self._events.append(event)

    def _diagnose(self, diagnostic: Diagnostic) -> None:
        self._diagnostics.append(diagnostic)
        self._emit(diagnostic)

    def _token_text(self, token: int) -> str | None:
        if 0 <= token < len(self._table):
            return self._table[token].decode("utf-8", "replace")
        return None

    def _content_text(self) -> str:
        # Join only the pieces added since the last call: O(new) per call.
        pieces = self._pieces
        if self._joined_n < len(pieces):
            self._joined += "".join(pieces[self._joined_n :])
            self._joined_n = len(pieces)
        return self._joined

    # -- actions: between messages ---------------------------------------------------------

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

    def _implicit_start(self, token: int) -> None:
        self._flush_junk(token)
        index = self._index()
        self._diagnose(
            Diagnostic(
                RecoveryKind.MISSING_START,
                index,
                f"<|channel|> without <|start|>: began a {self._default_role.value} message",
                kept="<|channel|>",
                tokens=(token,),
            )
        )
        self._next_role = self._default_role
        self._implicit = True
        self._header_tokens = [token]
        self._header_first = index

    def _skip_junk(self, token: int) -> None:
        if not self._junk:
            self._junk_start = self._index()
        self._junk.append(token)

    def _flush_junk(self, token: int | None) -> None:
        junk = self._junk
        if not junk:
            return
        self._junk = []
        text, _ = _lossy_text(self._table, junk)
        bad = sum(1 for t in junk if not 0 <= t < len(self._table))
        note = f" ({bad} invalid token id{'s' if bad > 1 else ''})" if bad else ""
        self._diagnose(
            Diagnostic(
                RecoveryKind.JUNK_BETWEEN_MESSAGES,
                self._junk_start,
                f"skipped {len(junk)} token{'s' if len(junk) > 1 else ''} "
                f"outside any message{note}",
                dropped=text,
                tokens=tuple(junk),
            )
        )

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
            header = _header_strict(self._table, tokens, self._next_role)
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

    def _end_header_leniently(self, token: int) -> None:
        role = self._next_role
        self._next_role = None
        try:
            # Whatever strict mode reads sensibly, lenient mode reads the same way.
            header = _header_strict(self._table, self._header_tokens, role)
            if not is_nonsense(header):
                self._header_tokens = []
                self._begin_content(header)
                return
        except HeaderError:
            pass
        segments = self._take_header_segments()
        if len(segments) > 1:
            # ``<|start|>`` inside the header: what precedes it never got its
            # <|message|> (or is the prompt's <|start|>assistant, repeated).
            self._recover_segments(segments[:-1], role, token, last_is_message=True)
            role = None
        first, tokens = segments[-1]
        try:
            header = _header_strict(self._table, tokens, role)
            if is_nonsense(header):
                raise HeaderError("special-token text in a header field")
        except HeaderError as exc:
            header = self._repair_header(tokens, first, role, exc.reason)
        self._begin_content(header)

    def _take_header_segments(self) -> list[tuple[int, list[int]]]:
        """The header tokens, split at each ``<|start|>``: (index of first token, tokens)."""
        tokens = self._header_tokens
        self._header_tokens = []
        first = self._header_first
        segments: list[tuple[int, list[int]]] = []
        begin = 0
        for i, t in enumerate(tokens):
            if t == st.START:
                segments.append((first + begin, tokens[begin:i]))
                begin = i + 1
        segments.append((first + begin, tokens[begin:]))
        return segments

    def _repair_header(
        self, tokens: list[int], first: int, role: Role | None, reason: str
    ) -> MessageHeader:
        text = self._header_text(tokens, first)
        try:
            header = parse_header(text, role)
            if not is_nonsense(header):
                return header  # only the bytes were bad
        except HeaderError:
            pass
        header, recovery = recover_header(text, role, self._default_role)
        self._diagnose(
            Diagnostic(
                RecoveryKind.HEADER_REPAIRED,
                first,
                f"header {text!r} refused in strict mode ({reason}); "
                + ("; ".join(recovery.notes) or "read leniently"),
                kept=_describe(header),
                dropped=" ".join(recovery.dropped) or None,
                tokens=tuple(tokens),
            )
        )
        return header

    def _header_text(self, tokens: list[int], first: int) -> str:
        """Decode header tokens, replacing bad bytes (diagnosed)."""
        text, bad = _lossy_text(self._table, tokens)
        if bad:
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    first,
                    "header bytes are not valid UTF-8 or include unknown token ids; "
                    "replaced by U+FFFD",
                    kept=text,
                    tokens=tuple(tokens),
                )
            )
        return text

    def _header_without_message(self, token: int | None) -> None:
        role = self._next_role
        self._next_role = None
        if token is not None and role is not None and not self._implicit:
            # The reference's own strict=False recovery (the first message of a
            # parser given a role): the whole header is the text, <|start|> and
            # all, and the message is kept even without text.
            tokens = self._header_tokens
            self._header_tokens = []
            self._recover_unfinished_header(
                RecoveryKind.MISSING_MESSAGE,
                self._header_first,
                tokens,
                role,
                self._index(),
                token,
                keep_empty=True,
            )
            return
        if token is not None and not self._implicit:
            # The reference's strict=False drops any other header that a stop
            # token ends before <|message|>. Lenient mode returns the reference's
            # messages wherever the reference returns any, so the header is
            # dropped here too; its text is kept in the diagnostic.
            self._drop_header(token)
            return
        segments = self._take_header_segments()
        self._recover_segments(segments, role, token, last_is_message=False)
        if token is None:
            self._flush_junk(None)

    def _drop_header(self, token: int) -> None:
        tokens = self._header_tokens
        self._header_tokens = []
        first = self._header_first
        text = self._header_text(tokens, first) if tokens else ""
        ended_by = _SPECIAL_NAME.get(token, f"token {token}")
        self._diagnose(
            Diagnostic(
                RecoveryKind.MISSING_MESSAGE,
                first,
                f"header ended by {ended_by} without <|message|>: dropped, as the "
                "reference's strict=False does",
                dropped=text or None,
                tokens=tuple(tokens),
            )
        )

    def _recover_segments(
        self,
        segments: list[tuple[int, list[int]]],
        role: Role | None,
        token: int | None,
        *,
        last_is_message: bool,
    ) -> None:
        """Recover header pieces that never reached ``<|message|>``, in order.

        Piece ``i + 1`` began at a ``<|start|>``; when ``last_is_message`` the
        last piece is followed by another header, otherwise by ``token`` (a stop
        token, or ``None`` at the end of the stream).
        """
        index = len(self._tokens) if token is None else self._index()
        for i, (first, tokens) in enumerate(segments):
            follows_start = last_is_message or i + 1 < len(segments)
            if follows_start:
                kind = RecoveryKind.REPEATED_START if not tokens else RecoveryKind.MISSING_MESSAGE
                end_index = first + len(tokens)  # the <|start|> after the piece
                stop: int | None = None
            else:
                kind = RecoveryKind.TRUNCATED if token is None else RecoveryKind.MISSING_MESSAGE
                end_index = index
                stop = token
            self._recover_unfinished_header(
                kind, first, tokens, role, end_index, stop, keep_empty=False
            )
            role = None

    def _recover_unfinished_header(
        self,
        kind: RecoveryKind,
        first: int,
        tokens: list[int],
        role: Role | None,
        end_index: int,
        stop_token: int | None,
        *,
        keep_empty: bool,
    ) -> None:
        """A header that ended without ``<|message|>``: its words become a message.

        This is the reference's ``strict=False`` rule for a parser's first message
        (``keep_empty``: kept even when it has no text); harmonia applies it to
        every message, keeping the others when they have text, so that no text is
        lost.
        """
        if end_index >= len(self._tokens):
            ended_by = "the end of the stream"
        else:
            ended_by = _SPECIAL_NAME.get(
                self._tokens[end_index], f"token {self._tokens[end_index]}"
            )
        if not tokens:
            what = (
                "<|start|> repeated at the beginning of a header"
                if kind is RecoveryKind.REPEATED_START
                else f"empty header ended by {ended_by}"
            )
            self._diagnose(Diagnostic(kind, end_index, f"{what}; nothing to keep"))
            return
        text = self._header_text(tokens, first)
        msg_role, name, channel, body = header_as_text(text, role, self._default_role)
        if not body and not keep_empty:
            self._diagnose(
                Diagnostic(
                    kind,
                    first,
                    f"header without <|message|> ended by {ended_by}, and no text: dropped",
                    dropped=text,
                    tokens=tuple(tokens),
                )
            )
            return
        self._diagnose(
            Diagnostic(
                kind,
                first,
                f"header without <|message|> ended by {ended_by}: its words are the text",
                kept=body,
                tokens=tuple(tokens),
            )
        )
        header = MessageHeader(msg_role, name, channel)
        self._emit(MessageStarted(header, first))
        if body:
            self._emit(ContentDelta(body, first))
        self._messages.append((header, body))
        if self._events is not None:
            self._emit(MessageDone(_message(header, body), end_index, stop_token))

    # -- actions: content ------------------------------------------------------------------------

    def _reset_content(self, header: MessageHeader | None) -> None:
        """Start (or end) a message: no text, no pending bytes, no delta."""
        self._header = header
        self._pieces = []
        self._joined = ""
        self._joined_n = 0
        self._pending = b""
        self._swallow = False
        self._delta = None

    def _begin_content(self, header: MessageHeader) -> None:
        self._reset_content(header)
        if self._events is not None:
            self._emit(MessageStarted(header, self._index()))

    def _add_content(self, token: int) -> None:
        # The hot path: keep it short.
        if self._swallow:
            self._delta = None
            return
        if token >= 0:
            try:
                data = self._table[token]
            except IndexError:
                self._unknown_content_token(token)
                return
        else:
            self._unknown_content_token(token)
            return
        if self._pending:
            data = self._pending + data
            self._pending = b""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = self._decode_damaged(data, token)
            if not text:
                self._delta = None
                return
        self._pieces.append(text)
        self._delta = text
        if self._events is not None:
            self._events.append(ContentDelta(text, len(self._tokens) - 1))

    def _decode_damaged(self, data: bytes, token: int) -> str:
        """Decode what can be decoded; keep an unfinished character for later.

        Strict mode takes the reference's step: the valid prefix, then at most
        one U+FFFD, the bytes after it held back for the next token (so the
        per-token deltas and, after an unknown id, the final text are the
        reference's; the held-back bytes still reach the final text). Lenient
        mode decodes everything it can.
        """
        if self._strict:
            try:
                data.decode()
            except UnicodeDecodeError as exc:
                valid = exc.start
                text = data[:valid].decode()
                if exc.reason == "unexpected end of data" and exc.end == len(data):
                    self._pending = data[valid:]  # incomplete: wait for more bytes
                    return text
                text += _REPLACEMENT
                self._pending = data[exc.end :]
                used = exc.end
            else:  # pragma: no cover - the caller saw an error
                raise AssertionError("not damaged")
        else:
            text, used = utf_8_decode(data, "replace", False)
            self._pending = data[used:]
        try:
            data[:used].decode()
        except UnicodeDecodeError:
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    self._index(),
                    "content bytes are not valid UTF-8; replaced by U+FFFD",
                    kept=text,
                    tokens=(token,),
                )
            )
        return text

    def _unknown_content_token(self, token: int) -> None:
        index = self._index()
        if self._strict:
            # The reference keeps the id pending; nothing after it decodes, and
            # the message ends with one U+FFFD. Reproduced, but not silently.
            self._swallow = True
            self._delta = None
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_TOKEN,
                    index,
                    f"unknown token id {token} in content: the rest of the message is "
                    "replaced by one U+FFFD (the reference's behaviour; use strict=False "
                    "to keep it)",
                    tokens=(token,),
                )
            )
            return
        data = self._pending + b"\xff"  # never valid: one U+FFFD for the id
        self._pending = b""
        text = data.decode("utf-8", "replace")
        self._diagnose(
            Diagnostic(
                RecoveryKind.INVALID_TOKEN,
                index,
                f"unknown token id {token} in content: replaced by U+FFFD",
                kept=text,
                tokens=(token,),
            )
        )
        self._pieces.append(text)
        self._delta = text
        self._emit(ContentDelta(text, index))

    def _finish_message(self, token: int | None) -> None:
        header = self._header
        assert header is not None
        index = self._index() if token is not None else len(self._tokens)
        text = self._content_text()
        tail = _REPLACEMENT if self._swallow else ""
        if self._pending:
            tail += self._pending.decode("utf-8", "replace")
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    index,
                    "message ended inside a multi-byte character; replaced by U+FFFD",
                    kept=tail,
                )
            )
        if tail:
            text += tail
            self._emit(ContentDelta(tail, index))
        self._messages.append((header, text))
        if self._events is not None:
            self._emit(MessageDone(_message(header, text), index, token))
        self._reset_content(None)


_STRICT_ROWS: Final = _compile(STRICT)
_LENIENT_ROWS: Final = _compile({**STRICT, **LENIENT})


def _message(header: MessageHeader, text: str) -> Message:
    return Message(
        Author(header.role, header.name),
        [TextContent(text)],
        header.channel,
        header.recipient,
        header.content_type,
    )


def _describe(header: MessageHeader) -> str:
    fields = [f"role={header.role.value}"]
    for name in ("name", "channel", "recipient", "content_type"):
        value = getattr(header, name)
        if value is not None:
            fields.append(f"{name}={value!r}")
    return " ".join(fields)


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
