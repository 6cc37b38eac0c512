"""How ``harmonia chat`` (and the demo) show a run in a terminal, event by event."""

from __future__ import annotations

from typing import Any, Protocol, TextIO

from ._events import (
    AgentEvent,
    Done,
    FinalDelta,
    PreambleDelta,
    ReasoningDelta,
    StopReason,
    ToolCallStarted,
    ToolResultReceived,
)

#: Lines of a tool result shown before "… (N more lines)".
RESULT_LINES = 12

_DIM, _CYAN, _GREEN, _YELLOW, _RESET = "\x1b[2m", "\x1b[36m", "\x1b[32m", "\x1b[33m", "\x1b[0m"


class CitationStream(Protocol):
    """What the browser's ``citation_stream()`` returns (only ``feed``/``finish`` are used)."""

    def feed(self, delta: str) -> Any: ...

    def finish(self) -> Any: ...


class CitationSource(Protocol):
    """A browser tool: ``citation_stream()`` converts one streamed answer's citations."""

    def citation_stream(self) -> CitationStream: ...


class TerminalView:
    """Writes a run's events to ``out``: reasoning dimmed (or hidden), tools, the answer.

    ``citations`` (a ``BrowserTool``) turns ``【3†L1-L2】`` in each answer into a
    link as it streams.
    """

    def __init__(
        self,
        out: TextIO,
        *,
        color: bool = False,
        show_reasoning: bool = True,
        citations: CitationSource | None = None,
    ) -> None:
        self.out = out
        self.color = color
        self.show_reasoning = show_reasoning
        self.citations = citations
        self._section: type[AgentEvent] | None = None
        self._stream: CitationStream | None = None  # the current answer's

    def _paint(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color and text else text

    def _begin(self, kind: type[AgentEvent], label: str | None) -> None:
        if self._section is kind:
            return
        if self._section is not None:
            self.out.write("\n")
        self._section = kind
        if label:
            self.out.write(label)

    def show(self, event: AgentEvent) -> None:
        """Write one event."""
        write = self.out.write
        if isinstance(event, ReasoningDelta):
            if self.show_reasoning:
                self._begin(ReasoningDelta, self._paint(_DIM, "thinking: "))
                write(self._paint(_DIM, event.text))
        elif isinstance(event, PreambleDelta):
            self._begin(PreambleDelta, None)
            write(event.text)
        elif isinstance(event, ToolCallStarted):
            self._begin(ToolCallStarted, None)
            call = event.message
            write(self._paint(_CYAN, f"→ {call.recipient} {call.text.strip()}") + "\n")
            self._section = None
        elif isinstance(event, ToolResultReceived):
            self._begin(ToolResultReceived, None)
            write(self._paint(_CYAN, f"← {event.reply.author.name}") + "\n")
            write(self._paint(_DIM, _clip(event.reply.text)) + "\n")
            self._section = None
        elif isinstance(event, FinalDelta):
            if self._section is not FinalDelta and self.citations is not None:
                self._stream = self.citations.citation_stream()
            self._begin(FinalDelta, self._paint(_GREEN, "answer: "))
            write(event.text if self._stream is None else str(self._stream.feed(event.text).text))
        elif isinstance(event, Done):
            self._done(event)
        self.out.flush()

    def _done(self, event: Done) -> None:
        if self._stream is not None:
            self.out.write(str(self._stream.finish().text))
            self._stream = None
        if self._section is not None:
            self.out.write("\n")
        self._section = None
        result = event.result
        usage = result.usage
        note = (
            f"[{result.stop_reason.value}: {usage.prompt_tokens} prompt + "
            f"{usage.completion_tokens} completion tokens, {result.steps} step"
            f"{'s' if result.steps != 1 else ''}]"
        )
        if result.stop_reason is StopReason.ERROR and result.error is not None:
            note += f"\nerror: {result.error}"
        elif result.stop_reason is StopReason.TOOL_CALLS:
            names = ", ".join(str(c.recipient) for c in result.tool_calls)
            note += f"\nthe model called {names}, which this session does not run"
        code = _DIM if result.stop_reason is StopReason.FINAL else _YELLOW
        self.out.write(self._paint(code, note) + "\n")


def _clip(text: str, lines: int = RESULT_LINES) -> str:
    rows = text.rstrip("\n").split("\n")
    if len(rows) <= lines:
        return "\n".join(rows)
    return "\n".join([*rows[:lines], f"… ({len(rows) - lines} more lines)"])
