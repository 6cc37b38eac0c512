"""Token provenance: which message, and which part of it, produced each token.

The renderer writes each header piece and each content part separately, so it
knows every boundary as it goes; it records them here instead of throwing them
away. A :class:`MessageSpan` is eight integers per rendered message (offsets into
the ids), and nothing ever re-parses or re-renders to find a boundary.

While rendering, a message is recorded in a compact form, a :data:`SpanRecord`
(its index, start, the header's offsets and its stop): the header's offsets are
the same for every message with that header, so recording costs one small tuple.
:class:`MessageSpans` turns records into :class:`MessageSpan` objects when they are
first read; the training masks read the records and never pay for the objects.

Parts of a message, in order, each ``[offset, next offset)`` (an absent part is
empty): ``start`` (``<|start|>``), ``role`` (the role or tool name, and
``:name``), ``recipient`` (`` to=...``), ``channel`` (``<|channel|>`` and its
name), ``content_type`` (`` json`` or `` <|constrain|>json``), ``message``
(``<|message|>``), ``body``, ``terminator`` (``<|end|>``, ``<|call|>`` or
``<|return|>``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Final, Literal, NamedTuple, get_args, overload

from .._errors import InputError

RenderMode = Literal["conversation", "completion", "training"]
RENDER_MODES: Final[tuple[RenderMode, ...]] = get_args(RenderMode)

PartName = Literal[
    "start", "role", "recipient", "channel", "content_type", "message", "body", "terminator"
]
PART_NAMES: Final[tuple[PartName, ...]] = get_args(PartName)


class MessageSpan(NamedTuple):
    """Where one rendered message lies in the ids.

    ``message_index`` is the message's index in the conversation; ``None`` marks the
    ``<|start|>`` and role that a completion render appends for the next turn
    (that header has no later parts: its other offsets all equal its ``stop``).
    Each field is the offset where that part begins; ``end`` is the offset of the
    terminator token and ``stop`` is one past it.
    """

    message_index: int | None
    start: int
    recipient: int
    channel: int
    content_type: int
    message: int
    end: int
    stop: int

    def parts(self) -> Iterator[tuple[PartName, int, int]]:
        """``(part, begin, end)`` for every part, empty ones included, in order."""
        s = self
        if s.message_index is None:
            yield ("start", s.start, s.start + 1)
            yield ("role", s.start + 1, s.stop)
            return
        bounds = (
            s.start,
            s.start + 1,
            s.recipient,
            s.channel,
            s.content_type,
            s.message,
            s.message + 1,
            s.end,
            s.stop,
        )
        for k, name in enumerate(PART_NAMES):
            yield (name, bounds[k], bounds[k + 1])

    def part(self, name: PartName) -> tuple[int, int]:
        """``(begin, end)`` of one part (empty when the message has none)."""
        for part, begin, end in self.parts():
            if part == name:
                return begin, end
        return self.stop, self.stop


#: ``(message_index, start, (recipient, channel, content_type, message), stop)``:
#: one rendered message, its header's part offsets counted from ``start``. The
#: next-turn header of a completion render has index ``None`` and every offset
#: at its stop.
SpanRecord = tuple[int | None, int, tuple[int, int, int, int], int]
_new_span: Final = tuple.__new__  # MessageSpan at tuple speed (no keyword handling)


def span_of(record: SpanRecord) -> MessageSpan:
    """The :class:`MessageSpan` of a record."""
    index, start, (recipient, channel, content_type, message), stop = record
    end = stop if index is None else stop - 1
    fields = (
        index,
        start,
        start + recipient,
        start + channel,
        start + content_type,
        start + message,
        end,
        stop,
    )
    return _new_span(MessageSpan, fields)


def record_of(span: MessageSpan) -> SpanRecord:
    """The record of a span (the inverse of :func:`span_of`)."""
    start = span.start
    offsets = (
        span.recipient - start,
        span.channel - start,
        span.content_type - start,
        span.message - start,
    )
    return (span.message_index, start, offsets, span.stop)


class MessageSpans(Sequence[MessageSpan]):
    """The spans of a render, one :class:`MessageSpan` per rendered message, in order.

    A read-only sequence that compares equal to a tuple of the same spans. The
    spans are built from :attr:`records` on first read: code that needs only
    offsets (the training masks) reads the records and skips the objects.

    >>> spans = MessageSpans([(0, 0, (2, 2, 4, 4), 7)])
    >>> spans[0].message, spans[0].end, spans[0].stop
    (4, 6, 7)
    >>> spans == (spans[0],)
    True
    """

    __slots__ = ("_spans", "records")

    def __init__(self, records: Sequence[SpanRecord]) -> None:
        self.records: Sequence[SpanRecord] = records
        self._spans: tuple[MessageSpan, ...] | None = None

    @classmethod
    def of(cls, spans: Iterable[MessageSpan]) -> MessageSpans:
        """The sequence of existing spans (their records are computed from them)."""
        built = tuple(spans)
        made = cls([record_of(span) for span in built])
        made._spans = built
        return made

    def _all(self) -> tuple[MessageSpan, ...]:
        spans = self._spans
        if spans is None:
            spans = self._spans = tuple(map(span_of, self.records))
        return spans

    @overload
    def __getitem__(self, index: int) -> MessageSpan: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[MessageSpan, ...]: ...
    def __getitem__(self, index: int | slice) -> MessageSpan | tuple[MessageSpan, ...]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[MessageSpan]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageSpans):
            return self._all() == other._all()
        if isinstance(other, tuple):
            return self._all() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"MessageSpans({list(self._all())!r})"


class RenderedConversation(NamedTuple):
    """Token ids with their provenance, from :meth:`HarmonyEncoding.render_with_spans`.

    ``spans`` has one :class:`MessageSpan` per rendered message, in order, and
    covers every token exactly once. ``dropped`` holds the indices of the
    messages the CoT policy left out (they have no span).
    """

    ids: list[int]
    spans: MessageSpans
    dropped: frozenset[int]
    mode: RenderMode

    def span_at(self, position: int) -> MessageSpan:
        """The span of the message that produced the token at ``position``."""
        lo = bisect_right(self.spans, position, key=attrgetter("stop"))
        if lo == len(self.spans) or position < 0:
            raise InputError(
                f"position {position} is outside the {len(self.ids)} rendered ids: "
                f"choose one in [0, {len(self.ids)})"
            )
        return self.spans[lo]
