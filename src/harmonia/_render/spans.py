"""Token provenance: which message, and which part of it, produced each token.

The renderer writes each header piece and each content part separately, so it
knows every boundary as it goes; it records them here instead of throwing them
away. A :class:`MessageSpan` is eight integers per rendered message (offsets into
the ids), so recording costs a few ``len`` calls per message, and nothing ever
re-parses or re-renders to find a boundary.

Parts of a message, in order, each ``[offset, next offset)`` (an absent part is
empty): ``start`` (``<|start|>``), ``role`` (the role or tool name, and
``:name``), ``recipient`` (`` to=...``), ``channel`` (``<|channel|>`` and its
name), ``content_type`` (`` json`` or `` <|constrain|>json``), ``message``
(``<|message|>``), ``body``, ``terminator`` (``<|end|>``, ``<|call|>`` or
``<|return|>``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Literal, NamedTuple, get_args

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


class RenderedConversation(NamedTuple):
    """Token ids with their provenance, from :meth:`HarmonyEncoding.render_with_spans`.

    ``spans`` has one :class:`MessageSpan` per rendered message, in order, and
    covers every token exactly once. ``dropped`` holds the indices of the
    messages the CoT policy left out (they have no span).
    """

    ids: list[int]
    spans: tuple[MessageSpan, ...]
    dropped: frozenset[int]
    mode: RenderMode

    def span_at(self, position: int) -> MessageSpan:
        """The span of the message that produced the token at ``position``."""
        lo, hi = 0, len(self.spans)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.spans[mid].stop <= position:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(self.spans) or position < 0:
            raise InputError(
                f"position {position} is outside the {len(self.ids)} rendered ids: "
                f"choose one in [0, {len(self.ids)})"
            )
        return self.spans[lo]
