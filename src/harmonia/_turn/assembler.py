"""Model output tokens -> output items, streaming: a turn of model output, read.

:class:`OutputAssembler` drives harmonia's lenient :class:`~harmonia.StreamableParser`
and turns each harmony message into one *item*, announced as soon as its header
is complete and filled by deltas:

=================================================  ================================
harmony message                                    item
=================================================  ================================
recipient ``functions.X`` (any channel)            ``call`` named ``X``
recipient ``browser.*`` / ``python`` / ``ns.tool``   ``call`` named by the recipient
channel ``analysis``, no recipient                 ``reasoning``
channel ``commentary``, no recipient               ``text``, phase ``commentary``
                                                   (a preamble: shown to users)
channel ``final``, none, or unknown                ``text``, phase ``final``
a message from another role (a hallucinated        ``reasoning`` (never shown), noted
tool result)
=================================================  ================================

Each header is read by :func:`~.recipients.classify`, the reading the agent
loop and tool dispatch share; a lone header word that the reference reads as a
recipient may be a content type instead (:func:`~.recipients.is_content_type_word`).

The model's mistakes never raise: the parser's recoveries and the assembler's
own (a ``<|start|>`` or ``<|channel|>`` inside content ends the message, other
special tokens inside content are dropped, so no special-token text ever
reaches an item) are listed in :attr:`OutputAssembler.diagnostics`. So is an
output that ends without a stop token (``truncated``): :meth:`OutputAssembler.finish`
says how the turn ended in a :class:`~.items.TurnSummary`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from .._enums import Role, StreamState
from .._errors import InputError
from .._names import DiagnosticKind
from .._parse import (
    ContentDelta,
    Diagnostic,
    EncodingLike,
    MessageDone,
    MessageHeader,
    MessageStarted,
    ParserEvent,
    StreamableParser,
)
from .._tokenizer import special_tokens as st
from .items import (
    ItemAdded,
    ItemDelta,
    ItemDone,
    OutputDiagnostic,
    OutputEvent,
    OutputItem,
    TurnEnd,
    TurnSummary,
    new_object,
    set_delta_item,
    set_delta_text,
)
from .recipients import classify

_ENDS_CONTENT: Final = frozenset({st.START, st.CHANNEL})
_RECOVERED: Final = frozenset({DiagnosticKind.MISSING_MESSAGE, DiagnosticKind.TRUNCATED})
_HEADER_WORD: Final = re.compile(r"(^|\s)to=|<\|")
_ENDS: Final = {st.RETURN: TurnEnd.RETURN, st.CALL: TurnEnd.CALL, st.END: TurnEnd.END}


@dataclass
class _State:
    current: OutputItem | None = None
    recovered_text: str | None = None
    finished: bool | None = None
    items: list[OutputItem] = field(default_factory=list)
    diagnostics: list[OutputDiagnostic] = field(default_factory=list)
    last_stop: int | None = None  # the stop token of the last message done
    cut: bool = False  # the end of the stream cut a message or a header short
    parser_truncated: bool = False  # ... and the parser said so in a diagnostic
    summary: TurnSummary | None = None


class OutputAssembler:
    """Feed the tokens the model sampled after ``<|start|>assistant``; get item events.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> asm = OutputAssembler(enc)
    >>> text = ("<|channel|>analysis<|message|>Hm.<|end|>"
    ...         "<|start|>assistant<|channel|>final<|message|>4<|return|>")
    >>> events = [e for t in enc.encode(text, allowed_special="all") for e in asm.feed(t)]
    >>> events += asm.finish()
    >>> [(i.kind, i.text) for i in asm.items], str(asm.summary.end)
    ([('reasoning', 'Hm.'), ('text', '4')], 'return')

    Without a stop token at the end the turn reads as cut off:

    >>> asm = OutputAssembler(enc)
    >>> for t in enc.encode("<|channel|>final<|message|>The answ", allowed_special="all"):
    ...     _ = asm.feed(t)
    >>> _ = asm.finish()
    >>> asm.summary.truncated, asm.items[0].truncated, [str(d.kind) for d in asm.diagnostics]
    (True, True, ['truncated'])
    """

    def __init__(self, encoding: EncodingLike) -> None:
        self._parser = StreamableParser(encoding, Role.ASSISTANT, strict=False)
        self._s = _State()
        self._fed = 0
        self._unattributed = 0  # header tokens, credited to the next item
        self._ended = False

    @property
    def items(self) -> list[OutputItem]:
        return self._s.items

    @property
    def diagnostics(self) -> list[OutputDiagnostic]:
        return self._s.diagnostics

    @property
    def token_count(self) -> int:
        return self._fed

    @property
    def content_item(self) -> OutputItem | None:
        """The item whose text the next ordinary token extends (``None`` outside content).

        What a token's log-probability belongs to: read it before :meth:`feed`.
        """
        return self._s.current if self._parser.state is StreamState.CONTENT else None

    @property
    def summary(self) -> TurnSummary:
        """How the turn ended, its items, diagnostics and token counts (after :meth:`finish`)."""
        if self._s.summary is None:
            raise InputError("the turn's summary is known after finish(): call finish() first")
        return self._s.summary

    def feed(self, token: int) -> list[OutputEvent]:
        """Process one token; returns the item events it caused."""
        if self._ended:
            raise InputError(
                "feed() after finish(): the turn is over; use a new OutputAssembler for the next"
            )
        index = self._fed
        self._fed += 1
        out: list[OutputEvent] = []
        owner = self._s.current
        if owner is None:
            self._unattributed += 1
        else:
            owner.tokens += 1
        # The id's range first: a chained compare, where the parser's state is a call.
        if (
            st.FIRST_SPECIAL <= token <= st.LAST_SPECIAL
            and self._parser.state is StreamState.CONTENT
        ):
            if token in _ENDS_CONTENT:
                self._note(DiagnosticKind.MISSING_END, "a message ended without <|end|>", index)
                self._handle(self._parser.feed(st.END), out)
            elif token not in st.STOP_TOKENS:
                text = st.SPECIAL_TOKEN_TEXT.get(token, str(token))
                note = f"{text} inside content: dropped"
                self._note(DiagnosticKind.SPECIAL_TOKEN_IN_CONTENT, note, index)
                return out
        events = self._parser.feed(token)
        if len(events) == 1 and type(events[0]) is ContentDelta:  # most tokens: text
            self._delta(events[0].text, out)
        else:
            self._handle(events, out)
        return out

    def finish(self, *, finished: bool | None = None) -> list[OutputEvent]:
        """End of the output; returns the last item events. Then :attr:`summary` is known.

        ``finished`` is what the caller knows about why generation stopped:
        ``None`` (default) reads it from the tokens: the turn is complete when
        it ends with ``<|return|>``, ``<|call|>`` or after an ``<|end|>``,
        otherwise it was cut off (``TurnEnd.TRUNCATED``, with a ``truncated``
        diagnostic). ``True``: it stopped on a stop condition the tokens do not
        show (an engine that leaves the stop token out): never truncated; a
        last call item means ``CALL``, anything else ``RETURN``. ``False``: it
        was cut off (a token limit), whatever the tokens say.
        """
        if self._ended:
            return []
        self._ended = True
        self._s.finished = finished
        out: list[OutputEvent] = []
        self._handle(self._parser.feed_eos(), out, at_eos=True)
        self._s.summary = self._summarise()
        return out

    # -- internals ----------------------------------------------------------------------

    def _note(self, kind: DiagnosticKind, description: str, index: int | None) -> None:
        self._s.diagnostics.append(OutputDiagnostic(kind, description, index))

    def _handle(
        self, events: list[ParserEvent], out: list[OutputEvent], *, at_eos: bool = False
    ) -> None:
        for event in events:
            if isinstance(event, ContentDelta):
                self._delta(event.text, out)
            elif isinstance(event, MessageStarted):
                self._start(event.header, event.token_index, out)
            elif isinstance(event, MessageDone):
                self._done(event, out, at_eos=at_eos)
            elif isinstance(event, Diagnostic):
                if event.kind in _RECOVERED:
                    self._s.recovered_text = event.kept
                cut = at_eos and event.kind is DiagnosticKind.TRUNCATED
                if cut and self._s.finished:
                    # The caller knows generation stopped normally (an engine that
                    # leaves the stop token out): the missing stop is no cut.
                    continue
                self._s.diagnostics.append(
                    OutputDiagnostic(event.kind, event.detail(), event.token_index)
                )
                if cut:
                    self._s.cut = self._s.parser_truncated = True
        self._s.recovered_text = None

    def _start(self, header: MessageHeader, index: int, out: list[OutputEvent]) -> None:
        item = self._classify(header, index)
        recovered, self._s.recovered_text = self._s.recovered_text, None
        if recovered and item.kind == "text" and _HEADER_WORD.search(recovered):
            item.kind = "reasoning"
            note = "a header without <|message|> kept as reasoning"
            self._note(DiagnosticKind.HEADER_TEXT, note, index)
        item.tokens, self._unattributed = self._unattributed, 0
        self._s.items.append(item)
        self._s.current = item
        out.append(ItemAdded(item))

    def _classify(self, header: MessageHeader, index: int) -> OutputItem:
        reading = classify(header.role, header.channel, header.recipient, header.content_type)
        for kind, note in reading.notes:
            self._note(kind, note, index)
        return OutputItem(
            reading.kind,
            len(self._s.items),
            reading.channel,
            reading.recipient,
            reading.content_type,
            reading.phase,
        )

    def _delta(self, text: str, out: list[OutputEvent]) -> None:
        item = self._s.current
        if item is None or not text:
            return
        # Appended in place: ``item.text += text`` would copy the whole text per token
        # (its slot holds a second reference), quadratic in a long item (a 40,000-token
        # reasoning doubled the cost per token). The slot is cleared first so that the
        # local holds the only reference and CPython extends the string where it is.
        whole = item.text
        item.text = ""
        whole += text
        item.text = whole
        delta = new_object(ItemDelta)  # ItemDelta(item, text), at slot speed (items.py)
        set_delta_item(delta, item)
        set_delta_text(delta, text)
        out.append(delta)

    def _done(self, event: MessageDone, out: list[OutputEvent], *, at_eos: bool) -> None:
        self._s.last_stop = event.stop_token
        if at_eos and event.stop_token is None:
            self._s.cut = True
        item = self._s.current
        if item is None:
            return
        text = event.message.text
        if text != item.text:
            if text.startswith(item.text):
                self._delta(text[len(item.text) :], out)
            else:
                note = "streamed deltas differ from the final text"
                self._note(DiagnosticKind.DELTA_MISMATCH, note, None)
            item.text = text
        item.done = True
        item.message = event.message
        item.stop_token = event.stop_token
        item.truncated = at_eos and event.stop_token is None and self._s.finished is not True
        self._s.current = None
        out.append(ItemDone(item))

    def _end(self) -> TurnEnd:
        """Why the turn ended, from the tokens and what the caller said."""
        finished = self._s.finished
        if finished is False:
            return TurnEnd.TRUNCATED
        known = None if self._s.cut else _ENDS.get(self._s.last_stop or -1)
        if known is not None:
            return known
        if finished is None:
            return TurnEnd.TRUNCATED
        items = self._s.items
        return TurnEnd.CALL if items and items[-1].kind == "call" else TurnEnd.RETURN

    def _summarise(self) -> TurnSummary:
        end = self._end()
        # One diagnostic per truncation: the parser's, when it noted one.
        if end is TurnEnd.TRUNCATED and not self._s.parser_truncated:
            self._note(DiagnosticKind.TRUNCATED, self._why_truncated(), self._fed)
        items = self._s.items
        stop = None if end is TurnEnd.TRUNCATED or self._s.cut else self._s.last_stop
        return TurnSummary(
            end,
            stop,
            tuple(items),
            tuple(self._s.diagnostics),
            self._fed,
            sum(i.tokens for i in items if i.kind == "reasoning"),
        )

    def _why_truncated(self) -> str:
        if self._s.finished is False:
            return "the caller said generation was cut off (a length limit)"
        last = self._s.items[-1] if self._s.items else None
        if last is not None and last.truncated:
            where = f"inside a {last.kind} item"
        elif self._s.last_stop == st.END or self._s.cut:
            where = "between messages"
        else:
            where = "before any message"
        return f"the output ended {where} without <|return|> or <|call|>: it was cut off"
