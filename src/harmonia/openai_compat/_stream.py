"""The driver both streaming adapters share: tokens in, API objects out.

The :class:`OutputAssembler` turns tokens into output-item events; a subclass
says how an event becomes Chat chunks or Responses events, what to send first
and what to send at the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from .._encoding import HarmonyEncoding
from .._turn import OutputAssembler, OutputDiagnostic, OutputEvent, TurnSummary
from ._common import JsonDict


class AssembledStream(ABC):
    """Feed sampled tokens, get the API objects to send."""

    def __init__(self, encoding: HarmonyEncoding) -> None:
        self._assembler = OutputAssembler(encoding)
        self._result: JsonDict | None = None

    @property
    def diagnostics(self) -> list[OutputDiagnostic]:
        """What the model got wrong so far, and how it was handled."""
        return self._assembler.diagnostics

    def feed(self, token: int) -> list[JsonDict]:
        """One sampled token -> the objects to send (often none or one)."""
        out = self._opening()
        for event in self._assembler.feed(token):
            out += self._translate(event)
        return out

    def feed_many(self, tokens: Iterable[int]) -> list[JsonDict]:
        out: list[JsonDict] = []
        for token in tokens:
            out += self.feed(token)
        return out

    def feed_read(self, tokens: Iterable[int]) -> tuple[list[JsonDict], list[OutputEvent]]:
        """Like :meth:`feed_many`, with the item events the objects were made from.

        A caller that acts on the output (an agent loop running its tool calls)
        follows these events instead of reading the ids a second time, so what
        it runs is what the client was sent.
        """
        out: list[JsonDict] = []
        events: list[OutputEvent] = []
        for token in tokens:
            out += self._opening()
            for event in self._assembler.feed(token):
                events.append(event)
                out += self._translate(event)
        return out, events

    def finish(self, *, finished: bool | None = None) -> list[JsonDict]:
        """End of generation: the last objects to send.

        ``finished``: ``None`` reads from the tokens whether the output was cut
        off (no stop token at the end), ``True`` says the engine stopped
        normally (it left the stop token out), ``False`` that it hit a limit.
        """
        if self._result is not None:
            return []
        out = self._opening()
        for event in self._assembler.finish(finished=finished):
            out += self._translate(event)
        return out + self._closing(self._assembler.summary)

    @abstractmethod
    def _opening(self) -> list[JsonDict]:
        """What is sent before anything else (once; later calls return nothing)."""

    @abstractmethod
    def _translate(self, event: OutputEvent) -> list[JsonDict]:
        """The objects one assembler event becomes."""

    @abstractmethod
    def _closing(self, summary: TurnSummary) -> list[JsonDict]:
        """The last objects; must set ``self._result``."""
