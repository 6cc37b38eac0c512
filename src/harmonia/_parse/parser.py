"""The streaming parser: one class, its parts, and the transition tables that drive it.

Theory of operation
===================

A completion is a sequence of messages, ``<|start|>{header}<|message|>{content}``
ended by a stop token (``<|end|>``, ``<|return|>``, ``<|call|>``) or by the end
of the stream. :class:`StreamableParser` is a small state machine over *tokens*,
in the style of h11's ``_state.py``: three states, a handful of input classes,
and a transition table saying, for each (state, input), which action runs, which
state follows, and which state an action that raises leaves. The parser does
no I/O: the caller feeds it tokens (:meth:`StreamableParser.process`) and tells
it when the stream ended (:meth:`StreamableParser.process_eos`).

States (``StreamState``)::

    EXPECT_START --<|start|>--> HEADER --<|message|>--> CONTENT --stop/EOS--> EXPECT_START

* EXPECT_START: between messages. Only ``<|start|>`` is valid.
* HEADER: header tokens are collected; at ``<|message|>`` they are decoded and
  read as one string (:mod:`.header`), because that is how the reference does
  it and a header is tiny. A parser made with a role (the prompt ended in
  ``<|start|>assistant``) starts here, with the role already known.
* CONTENT: every token except a stop token is content - including ``<|start|>``
  and the other special tokens, whose text becomes part of the message, as in
  the reference.

Inputs: ``<|start|>``, ``<|message|>``, a stop token, ``<|channel|>``, any
other token, and end-of-stream (EOS; EOS_COMPLETE when the caller says the
completion must end between messages). The strict table (:data:`STRICT`) is the
reference's streaming state machine. The lenient table
(``strict=False``) overrides a few cells (:data:`LENIENT`) so that no input
raises. An action runs first, and the cell's next state is entered when it
returns; when it raises, the cell's ``on_error`` state is entered (the state
the reference is left in: unchanged, except a refused header, which leaves
EXPECT_START). Only :meth:`StreamableParser.process` and
:meth:`~StreamableParser.process_eos` change the state, and only from a cell.

The parser owns its parts (docs/architecture.md, "One parser"): a
:class:`~.content.ContentDecoder`, a :class:`~.recovery.LenientRecovery` only
when ``strict=False``, and the header readers of :mod:`.header`.

The tables point at the actions themselves: the functions below, each taking
the parser and the token (``None`` at the end of the stream), and the
decoder's :meth:`~.content.ContentDecoder.add`, which the parser calls on its
decoder. Nearly every token is an ordinary token in content, so
:meth:`~StreamableParser.process` takes the content cell's step itself while
that step is the simple one (the decoder :attr:`~.content.ContentDecoder.ready`,
no events wanted): one table lookup, a ``decode`` and an append, no further
call. A flag says when; it is set wherever the parser enters a state (after
each cell's action), so nothing else needs to know about it.

Two ways to consume a stream: read the reference's properties after each
token (``current_channel``, ``last_content_delta``, ...), or call
:meth:`StreamableParser.feed`, which returns events - :class:`MessageStarted`
(with the header), :class:`ContentDelta`, :class:`MessageDone` and
:class:`Diagnostic` - so a server does not have to diff properties. The deltas
of a message's events always join to its final text. Batch parsing
(:mod:`.batch`) gives what a loop over :meth:`~StreamableParser.process` plus
:meth:`~StreamableParser.process_eos` gives.

Lenient recoveries (``strict=False``)
-------------------------------------

Lenient mode never raises and never silently loses text: each recovery appends a
:class:`Diagnostic` (kind, token index, what was kept, what was dropped, the raw
tokens) to :attr:`StreamableParser.diagnostics`. Where the reference's own
``strict=False`` mode returns a sensible answer, lenient mode returns the same.
The recoveries, one per :class:`~harmonia.RecoveryKind`, are tabled in
:mod:`.recovery`. A message the end of the stream cuts off (no stop token) is
returned, with a ``truncated`` diagnostic.

Strict mode and the reference
-----------------------------

Strict mode raises :class:`ParseError` (a ``HarmonyError``, with the reference's
message, plus the state, token id, token text and index) where the reference
raises, and otherwise gives the reference's messages and per-token properties,
except:

* headers: the fixes F1-F4 of what the reference misreads or cannot read back,
  and the junk it accepts but strict mode refuses, are tabled in :mod:`.header`;
* token ids below 0 or from 2**32 (an ``OverflowError`` in the reference's
  binding) behave like other unknown ids;
* ``process_eos(complete=True)`` refuses a completion that ends inside a
  message (the reference has no such option).

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
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .._enums import Role, StreamState
from .._errors import ParseError
from .._message import Message
from .._names import DiagnosticKind
from .._tokenizer import special_tokens as st
from .content import ContentDecoder
from .events import (
    ContentDelta,
    Diagnostic,
    EncodingLike,
    MessageDone,
    MessageStarted,
    Output,
    ParserEvent,
    _new_object,
    _set_text,
    _set_token_index,
    make_message,
)
from .header import HeaderError, MessageHeader, read_header_tokens
from .recovery import LenientRecovery, Outcome

# -- states and inputs ---------------------------------------------------------------

_ES, _HD, _CT = StreamState.EXPECT_START, StreamState.HEADER, StreamState.CONTENT
_STATES: Final = (_ES, _HD, _CT)  # a compiled row knows its state by index


class Input(enum.Enum):
    """The input classes the transition table distinguishes."""

    START = "<|start|>"
    MESSAGE = "<|message|>"
    STOP = "stop token"
    CHANNEL = "<|channel|>"
    OTHER = "other token"
    EOS = "end of stream"
    EOS_COMPLETE = "end of a complete stream"  # process_eos(complete=True)


_INPUT_TOKENS: Final[dict[Input, tuple[int, ...]]] = {
    Input.START: (st.START,),
    Input.MESSAGE: (st.MESSAGE,),
    Input.STOP: tuple(st.STOP_TOKENS),
    Input.CHANNEL: (st.CHANNEL,),
}

# -- strict actions (the reference's machine) -------------------------------------------------
#
# ``p`` is the parser; ``token`` is the token just appended to ``p._tokens``
# (``None`` at the end of the stream). They are the parser's private code, in
# functions so that the tables below can name them.


def nothing(p: StreamableParser, token: int | None) -> None:
    pass


def reject_token(p: StreamableParser, token: int) -> None:
    raise ParseError(
        f"Unexpected token {token} while expecting start token {st.START}",
        state=_ES.value,
        token=token,
        token_text=p._token_text(token),
        token_index=len(p._tokens) - 1,
    )


def begin_header(p: StreamableParser, token: int | None) -> None:
    p._header_tokens = []
    p._header_first = len(p._tokens)


def add_header_token(p: StreamableParser, token: int) -> None:
    p._header_tokens.append(token)


def reject_eos_in_header(p: StreamableParser, token: None) -> None:
    raise ParseError(
        "Unexpected EOS while waiting for message header to complete",
        state=_HD.value,
        token_index=len(p._tokens),
    )


def reject_eos_in_content(p: StreamableParser, token: None) -> None:
    raise ParseError(
        "Unexpected EOS while waiting for a stop token: the completion ended inside a "
        "message, without <|end|>, <|return|> or <|call|> (it may have been cut off; "
        "pass complete=False to accept the partial message)",
        state=_CT.value,
        token_index=len(p._tokens),
    )


def end_header(p: StreamableParser, token: int) -> None:
    # As in the reference: a refused header is discarded, and the role given
    # for the first message stays pending (the cell's on_error is EXPECT_START).
    tokens = p._header_tokens
    p._header_tokens = []
    try:
        header = read_header_tokens(p._table, tokens, p._next_role)
    except HeaderError as exc:
        raise ParseError(
            exc.reason,
            state=_HD.value,
            token=token,
            token_text="<|message|>",
            token_index=len(p._tokens) - 1,
        ) from None
    p._next_role = None
    p._begin_content(header)


def finish_message(p: StreamableParser, token: int | None) -> None:
    header = p._header
    assert header is not None
    index = len(p._tokens) - 1 if token is not None else len(p._tokens)
    content = p._content
    text = content.text()
    tail = content.flush(index)
    if tail:
        text += tail
        p._out.emit(ContentDelta(tail, index))
    p._messages.append((header, text))
    if p._out.events is not None:
        p._out.emit(MessageDone(make_message(header, text), index, token))
    p._header = None
    content.reset()


# -- lenient actions (strict=False) ---------------------------------------------------------
#
# Each asks ``p._recovery`` what the input becomes, and reports the answer.


def begin_header_leniently(p: StreamableParser, token: int) -> None:
    p._flush_junk()
    p._lenient.implicit = False
    begin_header(p, token)


def implicit_start(p: StreamableParser, token: int) -> None:
    p._flush_junk()
    index = len(p._tokens) - 1
    p._out.diagnose(p._lenient.missing_start(token, index))
    p._next_role = p._default_role
    p._header_tokens = [token]
    p._header_first = index


def skip_junk(p: StreamableParser, token: int) -> None:
    p._lenient.skip(token, len(p._tokens) - 1)


def flush_junk(p: StreamableParser, token: None) -> None:
    p._flush_junk()


def finish_truncated_message(p: StreamableParser, token: None) -> None:
    header = p._header
    assert header is not None
    where = f" to {header.recipient}" if header.recipient else ""
    where += f" in channel {header.channel}" if header.channel else ""
    p._out.diagnose(
        Diagnostic(
            DiagnosticKind.TRUNCATED,
            len(p._tokens),
            f"the stream ended inside a {header.role.value} message{where}, before its stop "
            "token (<|end|>, <|return|> or <|call|>): the message may be incomplete",
        )
    )
    finish_message(p, token)


def end_header_leniently(p: StreamableParser, token: int) -> None:
    tokens, role = p._take_header()
    outcomes, header = p._lenient.read_header(tokens, p._header_first, role)
    p._report(outcomes)
    p._begin_content(header)


def header_without_message(p: StreamableParser, token: int | None) -> None:
    tokens, role = p._take_header()
    end_index = len(p._tokens) - 1 if token is not None else len(p._tokens)
    p._report(p._lenient.header_without_message(tokens, p._header_first, role, token, end_index))


# -- the transition tables -----------------------------------------------------------------

# (parser, token or None); ContentDecoder.add takes the parser's decoder instead.
Action = Callable[[Any, Any], object]


class Transition(NamedTuple):
    """A cell: the action, the state that follows, the state an error leaves (default: same)."""

    action: Action
    next: StreamState
    on_error: StreamState | None = None


#: The reference's machine. Cells left out fall back to the state's OTHER cell
#: (EOS_COMPLETE: to its EOS cell).
STRICT: Final[dict[tuple[StreamState, Input], Transition]] = {
    (_ES, Input.START): Transition(begin_header, _HD),
    (_ES, Input.OTHER): Transition(reject_token, _ES),
    (_ES, Input.EOS): Transition(nothing, _ES),
    (_HD, Input.MESSAGE): Transition(end_header, _CT, on_error=_ES),
    (_HD, Input.OTHER): Transition(add_header_token, _HD),  # stop tokens, <|start|>: header
    (_HD, Input.EOS): Transition(reject_eos_in_header, _HD),
    (_CT, Input.STOP): Transition(finish_message, _ES),
    (_CT, Input.OTHER): Transition(ContentDecoder.add, _CT),  # <|start|>, <|message|>...: text
    (_CT, Input.EOS): Transition(finish_message, _ES),
    (_CT, Input.EOS_COMPLETE): Transition(reject_eos_in_content, _CT),
}

#: ``strict=False`` overrides (no action raises).
LENIENT: Final[dict[tuple[StreamState, Input], Transition]] = {
    (_ES, Input.START): Transition(begin_header_leniently, _HD),
    (_ES, Input.CHANNEL): Transition(implicit_start, _HD),
    (_ES, Input.OTHER): Transition(skip_junk, _ES),
    (_ES, Input.EOS): Transition(flush_junk, _ES),
    (_HD, Input.MESSAGE): Transition(end_header_leniently, _CT),
    (_HD, Input.STOP): Transition(header_without_message, _ES),
    (_HD, Input.EOS): Transition(header_without_message, _ES),
    (_CT, Input.EOS): Transition(finish_truncated_message, _ES),
    (_CT, Input.EOS_COMPLETE): Transition(finish_truncated_message, _ES),
}

# Compiled: a _Row per state, pointing at its cells; a cell is (action, next
# row, row after an error, whether the action is the decoder's). The parser
# holds its current row. An action of the decoder is called on the parser's
# decoder: a content token is one call from process() to ContentDecoder.add,
# the hot path.
_Cell = tuple[Action, "_Row", "_Row", bool]
_DECODER_ACTIONS: Final = frozenset({ContentDecoder.add})


class _Row:
    """One state's cells: special tokens that have a cell, OTHER, EOS, EOS_COMPLETE."""

    __slots__ = ("eos", "eos_complete", "other", "specials", "state")

    def __init__(self, state: int) -> None:
        self.state = state  # index into _STATES
        self.specials: dict[int, _Cell] = {}
        self.other: _Cell
        self.eos: _Cell
        self.eos_complete: _Cell


def _compile(table: dict[tuple[StreamState, Input], Transition]) -> tuple[_Row, ...]:
    rows = tuple(_Row(i) for i in range(len(_STATES)))
    for row, state in zip(rows, _STATES, strict=True):

        def cell(inp: Input, state: StreamState = state) -> _Cell:
            fallback = Input.EOS if inp is Input.EOS_COMPLETE else Input.OTHER
            action, nxt, on_error = table.get((state, inp)) or table[(state, fallback)]
            return (
                action,
                rows[_STATES.index(nxt)],
                rows[_STATES.index(on_error or state)],
                action in _DECODER_ACTIONS,
            )

        row.specials = {
            token: cell(inp)
            for inp, ids in _INPUT_TOKENS.items()
            if (state, inp) in table
            for token in ids
        }
        # process() looks up only ids from FIRST_SPECIAL on.
        assert min(row.specials, default=st.FIRST_SPECIAL) >= st.FIRST_SPECIAL
        row.other = cell(Input.OTHER)
        row.eos = cell(Input.EOS)
        row.eos_complete = cell(Input.EOS_COMPLETE)
    return rows


_STRICT_ROWS: Final = _compile(STRICT)
_LENIENT_ROWS: Final = _compile({**STRICT, **LENIENT})
_EXPECT_START, _HEADER, _CONTENT = range(3)
_FIRST_SPECIAL: Final = st.FIRST_SPECIAL

# -- the parser ----------------------------------------------------------------------


class StreamableParser:
    """Incremental harmony parser (the reference's API, plus events and diagnostics).

    ``role`` is the role of the first message when the prompt already ended with
    ``<|start|>{role}`` (the completion then starts inside its header); ``None``
    when the completion starts with ``<|start|>``. ``strict=False`` enables the
    recoveries tabled in :mod:`harmonia._parse.recovery`.

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
        "_content",
        "_default_role",
        "_header",
        "_header_first",
        "_header_tokens",
        "_messages",
        "_next_role",
        "_out",
        "_plain",
        "_recovery",
        "_row",
        "_strict",
        "_table",
        "_tokenizer",
        "_tokens",
        "last_content_delta",
    )

    def __init__(self, encoding: EncodingLike, role: Role | None, *, strict: bool = True) -> None:
        if role is not None and not isinstance(role, Role):
            role = Role(role)
        self._tokenizer = encoding.tokenizer
        self._table: list[bytes] = self._tokenizer.token_bytes_table  # token id -> bytes
        self._strict = bool(strict)
        self._out = Output()  # tokens seen, diagnostics, events of the current feed()
        self._tokens = self._out.tokens  # every token processed (the same list)
        self._next_role = role  # the role given for the next header, if any
        self._default_role = role or Role.ASSISTANT  # for a message recovered without one
        # HEADER: the header's tokens and the index of the first.
        self._header_tokens: list[int] = []
        self._header_first = 0
        # CONTENT: the message's header, and its text.
        self._header: MessageHeader | None = None
        self._content = ContentDecoder(self._table, strict=self._strict, out=self._out)
        self._messages: list[tuple[MessageHeader, str]] = []  # finished messages
        self._recovery = None if self._strict else LenientRecovery(self._table, self._default_role)
        rows = _STRICT_ROWS if self._strict else _LENIENT_ROWS
        self._row = rows[_HEADER if role is not None else _EXPECT_START]  # the current state's
        self._plain = False  # whether process() may take its hot path (see _enter)
        # An attribute, not a property: streaming servers read it after every
        # token, and a slot is the cheapest read there is. It is the decoder's
        # delta: the hot path sets both, and _enter copies it after any other step.
        self.last_content_delta: str | None = None
        """The text the last token added (``None`` if none, e.g. half a character). Read only."""

    # -- feeding -------------------------------------------------------------------

    def process(self, token: int) -> StreamableParser:
        """Feed one token. Strict mode raises :class:`ParseError` where the reference raises."""
        self._tokens.append(token)
        if self._plain and 0 <= token < _FIRST_SPECIAL:
            # The hot path: an ordinary token in content, the decoder ready, no
            # events wanted. The table's content cell (ContentDecoder.add) would
            # take this same step; taking it here saves a call per token.
            try:
                text = self._table[token].decode()
            except UnicodeDecodeError:
                pass  # half a character, or not UTF-8: the decoder's to handle, below
            else:
                content = self._content
                content.pieces.append(text)
                content.delta = self.last_content_delta = text
                return self
        row = self._row
        # Only special tokens have cells of their own; most tokens skip the lookup.
        action, nxt, on_error, of_decoder = (
            row.other if token < _FIRST_SPECIAL else row.specials.get(token, row.other)
        )
        if of_decoder:  # a content token (the decoder raises nothing)
            action(self._content, token)
        else:
            try:
                action(self, token)
            except ParseError:
                self._enter(on_error)
                raise
        self._enter(nxt)
        return self

    def process_eos(self, *, complete: bool = False) -> StreamableParser:
        """Signal the end of the stream: a message in progress is completed.

        A message without its stop token (the guide's "do not pass in the stop
        token", or a completion cut off by a token limit) is returned as it is.
        Lenient mode adds a ``truncated`` :class:`Diagnostic` for it; with
        ``complete=True`` strict mode raises :class:`ParseError` instead
        (state ``Content``), leaving the parser as it was.
        """
        row = self._row
        action, nxt, on_error, of_decoder = row.eos_complete if complete else row.eos
        try:
            action(self._content if of_decoder else self, None)
        except ParseError:
            self._enter(on_error)
            raise
        self._enter(nxt)
        return self

    def feed(self, token: int) -> list[ParserEvent]:
        """Like :meth:`process`, returning what happened as events."""
        if self._plain and 0 <= token < _FIRST_SPECIAL:
            # process()'s hot path, and the one event it makes.
            try:
                text = self._table[token].decode()
            except UnicodeDecodeError:
                pass
            else:
                tokens = self._tokens
                tokens.append(token)
                content = self._content
                content.pieces.append(text)
                content.delta = self.last_content_delta = text
                # ContentDelta(text, index), built at slot speed (see events.py).
                delta = _new_object(ContentDelta)
                _set_text(delta, text)
                _set_token_index(delta, len(tokens) - 1)
                return [delta]
        return self._collect(self.process, token)

    def feed_eos(self, *, complete: bool = False) -> list[ParserEvent]:
        """Like :meth:`process_eos`, returning what happened as events."""
        return self._collect(lambda _: self.process_eos(complete=complete), None)

    def _collect(self, step: Callable[[Any], object], token: int | None) -> list[ParserEvent]:
        """The events that ``step(token)`` makes."""
        events: list[ParserEvent] = []
        self._out.events = events
        self._plain = False  # process() must take the path that makes events
        try:
            step(token)
        finally:
            self._out.events = None
            self._enter(self._row)
        return events

    # -- the reference's properties ----------------------------------------------------

    @property
    def state(self) -> StreamState:
        return _STATES[self._row.state]

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def current_role(self) -> Role | None:
        """The message's role in content; otherwise the role given for the first message."""
        if self._row.state == _CONTENT and self._header is not None:
            return self._header.role
        return self._next_role

    @property
    def current_channel(self) -> str | None:
        return self._header.channel if self._row.state == _CONTENT and self._header else None

    @property
    def current_recipient(self) -> str | None:
        return self._header.recipient if self._row.state == _CONTENT and self._header else None

    @property
    def current_content_type(self) -> str | None:
        return self._header.content_type if self._row.state == _CONTENT and self._header else None

    @property
    def current_content(self) -> str:
        """The text of the message being streamed so far (``''`` outside content)."""
        if self._row.state != _CONTENT:
            return ""
        return self._content.text()

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
        return tuple(self._out.diagnostics)

    @property
    def state_data(self) -> dict[str, object]:
        """The reference's ``state_data`` dict."""
        if self._row.state == _EXPECT_START:
            return {"state": "ExpectStart"}
        if self._row.state == _HEADER:
            return {"state": "Header", "header_tokens": list(self._header_tokens)}
        assert self._header is not None
        encode = self._tokenizer.encode_ordinary
        content_tokens = [t for piece in self._content.pieces for t in encode(piece)]
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

    # -- what the actions share ---------------------------------------------------------

    @property
    def _lenient(self) -> LenientRecovery:
        """The recovery part; only lenient actions, which exist only when it does, use it."""
        recovery = self._recovery
        assert recovery is not None
        return recovery

    def _enter(self, row: _Row) -> None:
        """Enter a state (only a cell's; see process()); update the delta and the hot path's flag.

        It is open in content while the decoder is ready and no events are
        wanted; only the paths that end here change any of that.
        """
        self._row = row
        self.last_content_delta = self._content.delta
        self._plain = row.state == _CONTENT and self._content.ready and self._out.events is None

    def _token_text(self, token: int) -> str | None:
        if 0 <= token < len(self._table):
            return self._table[token].decode("utf-8", "replace")
        return None

    def _take_header(self) -> tuple[list[int], Role | None]:
        """The header's tokens and the role given for it, both taken (lenient actions)."""
        taken = self._header_tokens, self._next_role
        self._header_tokens, self._next_role = [], None
        return taken

    def _begin_content(self, header: MessageHeader) -> None:
        self._header = header
        self._content.reset()
        self._out.emit(MessageStarted(header, len(self._tokens) - 1))

    def _flush_junk(self) -> None:
        diagnostic = self._lenient.flush_junk()
        if diagnostic is not None:
            self._out.diagnose(diagnostic)

    def _report(self, outcomes: list[Outcome]) -> None:
        """Report what lenient recovery decided: diagnostics, and recovered messages."""
        out = self._out
        for outcome in outcomes:
            if isinstance(outcome, Diagnostic):
                out.diagnose(outcome)
                continue
            header, text = outcome.header, outcome.text
            self._messages.append((header, text))
            if out.events is not None:
                out.emit(MessageStarted(header, outcome.first))
                if text:
                    out.emit(ContentDelta(text, outcome.first))
                out.emit(
                    MessageDone(make_message(header, text), outcome.end_index, outcome.stop_token)
                )
