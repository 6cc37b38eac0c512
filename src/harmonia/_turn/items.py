"""What reading a turn of model output produces: items, their events, diagnostics, the summary.

Plain values: :mod:`.assembler` makes them, the OpenAI conversions, the agent
loop and the server read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._message import Message
from .._names import FINAL, DiagnosticKind, WordEnum
from .recipients import ItemKind as ItemKind
from .recipients import api_name


@dataclass(frozen=True, slots=True)
class OutputDiagnostic:
    """Something the model got wrong (or the output lacked) and how it was handled.

    ``kind`` is a :class:`~harmonia.RecoveryKind` (the parser's recoveries and
    the turn layer's: ``missing-end``, ``special-token-in-content``,
    ``foreign-author``, ``unknown-channel``, ``content-type-as-recipient``,
    ``header-text``, ``delta-mismatch``; ``truncated`` when the output ended
    without a stop token). It is a ``str`` enum: it compares equal to its value
    and serialises to it in JSON.
    """

    kind: DiagnosticKind
    description: str
    token_index: int | None = None

    def __str__(self) -> str:
        where = "" if self.token_index is None else f" at token {self.token_index}"
        return f"{self.kind.value}{where}: {self.description}"


@dataclass(slots=True)
class OutputItem:
    """One harmony message of the output, as an API or an agent loop sees it.

    ``kind``: ``"reasoning"``, ``"text"`` or ``"call"``. ``text`` is the
    reasoning, the text, or a call's arguments. ``phase`` is ``"commentary"``
    for a preamble, ``"final"`` for an answer. ``tokens``: how many of the
    output's tokens belong to this item (its header included). ``truncated``:
    the output ended inside this item, without its stop token. ``message``: the
    harmony :class:`~harmonia.Message` exactly as the parser read it (set when
    the item is done), so a call can be dispatched as it was sampled.
    ``stop_token``: the token that ended it (``<|end|>``, ``<|return|>``,
    ``<|call|>``), ``None`` if none did.
    """

    kind: ItemKind
    index: int
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    phase: str = FINAL
    text: str = ""
    done: bool = False
    truncated: bool = False
    tokens: int = 0
    message: Message | None = None
    stop_token: int | None = None

    @property
    def name(self) -> str:
        """A call's API name (``functions.get_weather`` -> ``get_weather``)."""
        return api_name(self.recipient or "")


@dataclass(frozen=True, slots=True)
class ItemAdded:
    """An item's header is complete; its text follows in :class:`ItemDelta` events."""

    item: OutputItem


@dataclass(frozen=True, slots=True)
class ItemDelta:
    """New text of ``item`` (already appended to ``item.text``)."""

    item: OutputItem
    text: str


# A frozen dataclass sets each field with object.__setattr__, a call per field;
# the assembler makes an ItemDelta per streamed token, so it fills the slots
# directly (as the parser does for its ContentDelta).
new_object = object.__new__
set_delta_item = vars(ItemDelta)["item"].__set__  # the slots' member descriptors
set_delta_text = vars(ItemDelta)["text"].__set__


@dataclass(frozen=True, slots=True)
class ItemDone:
    """``item`` is complete: its ``message`` and ``stop_token`` are set."""

    item: OutputItem


OutputEvent = ItemAdded | ItemDelta | ItemDone


class TurnEnd(WordEnum):
    """Why a turn of model output ended.

    * ``RETURN``: ``<|return|>``, the final answer is complete (or the caller
      said generation stopped normally and the last item is not a call).
    * ``CALL``: ``<|call|>``, a tool call waits for its result (or the caller
      said generation stopped normally and the last item is a call).
    * ``END``: the output stopped right after an ``<|end|>`` (an engine that
      stops on every stop token of the reference's ``stop_tokens()``).
    * ``TRUNCATED``: the output ended without a stop token: cut off, by a token
      limit or otherwise. The last item may be incomplete (see
      :attr:`OutputItem.truncated`).
    """

    RETURN = "return"
    CALL = "call"
    END = "end"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """A finished turn: how it ended, its items, what went wrong, and usage.

    ``stop_token`` is the token that ended the turn when it was in the output
    (``None`` otherwise). ``output_tokens`` counts every token fed;
    ``reasoning_tokens`` those of reasoning items.
    """

    end: TurnEnd
    stop_token: int | None
    items: tuple[OutputItem, ...]
    diagnostics: tuple[OutputDiagnostic, ...]
    output_tokens: int
    reasoning_tokens: int

    @property
    def truncated(self) -> bool:
        """The output was cut off: no ``<|return|>``, ``<|call|>`` or final ``<|end|>``."""
        return self.end is TurnEnd.TRUNCATED

    @property
    def calls(self) -> tuple[OutputItem, ...]:
        """The tool-call items, in order (each with the :class:`Message` to dispatch)."""
        return tuple(item for item in self.items if item.kind == "call")
