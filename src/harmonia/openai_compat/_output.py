"""Model output tokens -> output items, streaming, for both APIs.

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

A lone header word that the reference reads as a recipient is taken as a
content type, not a call, outside the ``commentary`` and ``analysis`` channels
(``<|channel|>final json``) and, on those, when it is a content-type word
(``json``, ``code``, ...). Any other recipient without a namespace is a call to
that name (the model sometimes drops ``functions.``).

The model's mistakes never raise: the parser's recoveries and the assembler's
own (a ``<|start|>`` or ``<|channel|>`` inside content ends the message, other
special tokens inside content are dropped, so no special-token text ever
reaches an item) are listed in :attr:`OutputAssembler.diagnostics`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

from .._encoding import HarmonyEncoding
from .._enums import Role, StreamState
from .._parse import (
    ContentDelta,
    Diagnostic,
    MessageDone,
    MessageHeader,
    MessageStarted,
    ParserEvent,
    RecoveryKind,
    StreamableParser,
)
from .._tokenizer import special_tokens as st
from ._common import api_name

ItemKind = Literal["reasoning", "text", "call"]

_NOT_RECIPIENTS: Final = frozenset({"all", "assistant", "user"})
_ENDS_CONTENT: Final = frozenset({st.START, st.CHANNEL})
_RECOVERED: Final = frozenset({RecoveryKind.MISSING_MESSAGE, RecoveryKind.TRUNCATED})
_HEADER_WORD: Final = re.compile(r"(^|\s)to=|<\|")
# Lone header words that are content types, not recipients (``<|channel|>analysis code``).
_TYPE_WORDS: Final = frozenset({"json", "code", "text", "markdown", "md", "html", "yaml", "xml"})


@dataclass(frozen=True, slots=True)
class OutputDiagnostic:
    """Something the model got wrong and how it was handled.

    ``kind`` is a :class:`~harmonia.RecoveryKind` value for the parser's
    recoveries, or one of ``missing-end``, ``special-token-in-content``,
    ``foreign-author``, ``unknown-channel``, ``content-type-as-recipient``,
    ``header-text``, ``delta-mismatch``.
    """

    kind: str
    description: str
    token_index: int | None = None

    def __str__(self) -> str:
        where = "" if self.token_index is None else f" at token {self.token_index}"
        return f"{self.kind}{where}: {self.description}"


@dataclass(slots=True)
class OutputItem:
    """One harmony message of the output, as the APIs see it.

    ``text`` is the reasoning, the text, or a call's arguments. ``phase`` is
    ``"commentary"`` for a preamble, ``"final"`` for an answer. ``truncated``:
    the stream was cut off (e.g. by a token limit) inside this item.
    """

    kind: ItemKind
    index: int
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    phase: str = "final"
    text: str = ""
    done: bool = False
    truncated: bool = False
    tokens: int = 0

    @property
    def name(self) -> str:
        """A call's API name (``functions.get_weather`` -> ``get_weather``)."""
        return api_name(self.recipient or "")


@dataclass(frozen=True, slots=True)
class ItemAdded:
    item: OutputItem


@dataclass(frozen=True, slots=True)
class ItemDelta:
    item: OutputItem
    text: str


@dataclass(frozen=True, slots=True)
class ItemDone:
    item: OutputItem


OutputEvent = ItemAdded | ItemDelta | ItemDone


@dataclass
class _State:
    current: OutputItem | None = None
    recovered_text: str | None = None
    finished: bool = True
    items: list[OutputItem] = field(default_factory=list)
    diagnostics: list[OutputDiagnostic] = field(default_factory=list)


class OutputAssembler:
    """Feed the tokens the model sampled after ``<|start|>assistant``; get item events.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> asm = OutputAssembler(enc)
    >>> text = ("<|channel|>analysis<|message|>Hm.<|end|>"
    ...         "<|start|>assistant<|channel|>final<|message|>4")
    >>> events = [e for t in enc.encode(text, allowed_special="all") for e in asm.feed(t)]
    >>> events += asm.finish()
    >>> [(i.kind, i.text) for i in asm.items]
    [('reasoning', 'Hm.'), ('text', '4')]
    """

    def __init__(self, encoding: HarmonyEncoding) -> None:
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

    def feed(self, token: int) -> list[OutputEvent]:
        """Process one token; returns the item events it caused."""
        if self._ended:
            raise ValueError("feed() after finish()")
        index = self._fed
        self._fed += 1
        out: list[OutputEvent] = []
        owner = self._s.current
        if owner is None:
            self._unattributed += 1
        else:
            owner.tokens += 1
        if self._parser.state is StreamState.CONTENT and st.is_special_token(token):
            if token in _ENDS_CONTENT:
                self._note("missing-end", "a message ended without <|end|>", index)
                self._handle(self._parser.feed(st.END), out)
            elif token not in st.STOP_TOKENS:
                text = st.SPECIAL_TOKEN_TEXT.get(token, str(token))
                self._note("special-token-in-content", f"{text} inside content: dropped", index)
                return out
        self._handle(self._parser.feed(token), out)
        return out

    def finish(self, *, finished: bool = True) -> list[OutputEvent]:
        """End of the stream. ``finished=False``: it was cut off (a token limit)."""
        if self._ended:
            return []
        self._ended = True
        self._s.finished = finished
        out: list[OutputEvent] = []
        self._handle(self._parser.feed_eos(), out)
        return out

    # -- internals ----------------------------------------------------------------------

    def _note(self, kind: str, description: str, index: int | None) -> None:
        self._s.diagnostics.append(OutputDiagnostic(kind, description, index))

    def _handle(self, events: list[ParserEvent], out: list[OutputEvent]) -> None:
        for event in events:
            if isinstance(event, ContentDelta):
                self._delta(event.text, out)
            elif isinstance(event, MessageStarted):
                self._start(event.header, event.token_index, out)
            elif isinstance(event, MessageDone):
                self._done(event.message.text, event.stop_token, out)
            elif isinstance(event, Diagnostic):
                self._s.diagnostics.append(
                    OutputDiagnostic(event.kind.value, str(event), event.token_index)
                )
                if event.kind in _RECOVERED:
                    self._s.recovered_text = event.kept
        self._s.recovered_text = None

    def _start(self, header: MessageHeader, index: int, out: list[OutputEvent]) -> None:
        item = self._classify(header, index)
        recovered, self._s.recovered_text = self._s.recovered_text, None
        if recovered and item.kind == "text" and _HEADER_WORD.search(recovered):
            item.kind = "reasoning"
            self._note("header-text", "a header without <|message|> kept as reasoning", index)
        item.tokens, self._unattributed = self._unattributed, 0
        self._s.items.append(item)
        self._s.current = item
        out.append(ItemAdded(item))

    def _classify(self, header: MessageHeader, index: int) -> OutputItem:
        item = OutputItem(
            "text",
            len(self._s.items),
            header.channel,
            header.recipient,
            header.content_type,
        )
        recipient, channel = header.recipient, header.channel
        if recipient is not None and "<|" in recipient:
            self._note("header-text", f"recipient {recipient!r} ignored", index)
            recipient = None
        if channel is not None and "<|" in channel:
            self._note("header-text", f"channel {channel!r} ignored", index)
            channel = item.channel = None
        if recipient in _NOT_RECIPIENTS:
            recipient = None
        item.recipient = recipient
        if header.role is not Role.ASSISTANT:
            item.kind, item.recipient = "reasoning", None
            self._note("foreign-author", f"a {header.role.value} message in the output", index)
        elif recipient is not None:
            bare = "." not in recipient and recipient != "python"
            if bare and (channel not in ("commentary", "analysis") or recipient in _TYPE_WORDS):
                item.recipient, item.content_type = None, recipient
                note = f"{recipient!r} read as a content type"
                self._note("content-type-as-recipient", note, index)
            else:
                item.kind = "call"
        elif channel == "analysis":
            item.kind = "reasoning"
        elif channel == "commentary":
            item.phase = "commentary"
        elif channel not in (None, "final"):
            self._note("unknown-channel", f"channel {channel!r} read as final", index)
        return item

    def _delta(self, text: str, out: list[OutputEvent]) -> None:
        item = self._s.current
        if item is None or not text:
            return
        item.text += text
        out.append(ItemDelta(item, text))

    def _done(self, text: str, stop_token: int | None, out: list[OutputEvent]) -> None:
        item = self._s.current
        if item is None:
            return
        if text != item.text:
            if text.startswith(item.text):
                self._delta(text[len(item.text) :], out)
            else:
                self._note("delta-mismatch", "streamed deltas differ from the final text", None)
            item.text = text
        item.done = True
        item.truncated = stop_token is None and self._ended and not self._s.finished
        self._s.current = None
        out.append(ItemDone(item))
