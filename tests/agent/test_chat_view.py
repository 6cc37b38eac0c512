"""The terminal view of a run: dimmed or hidden reasoning, clipped tool results."""

from __future__ import annotations

import io

from harmonia import Author, Message, Role
from harmonia.agent import (
    AgentResult,
    Done,
    FinalDelta,
    ReasoningDelta,
    StopReason,
    TerminalView,
    ToolCallStarted,
    ToolResultReceived,
    new_conversation,
)
from harmonia.engines import Usage

CALL = Message.from_role_and_content(Role.ASSISTANT, "print(1)").with_recipient("python")
REPLY = Message.from_author_and_content(Author(Role.TOOL, "python"), "\n".join(map(str, range(30))))
RESULT = AgentResult(new_conversation("?"), (), StopReason.FINAL, Usage(10, 5), 2)
EVENTS = [
    ReasoningDelta("Let me "),
    ReasoningDelta("think."),
    ToolCallStarted(CALL),
    ToolResultReceived(CALL, REPLY),
    FinalDelta("Done"),
    FinalDelta("!"),
    Done(RESULT),
]


def _show(**options: object) -> str:
    out = io.StringIO()
    view = TerminalView(out, **options)  # type: ignore[arg-type]
    for event in EVENTS:
        view.show(event)
    return out.getvalue()


def test_plain_view() -> None:
    assert _show() == (
        "thinking: Let me think.\n"
        "→ python print(1)\n"
        "← python\n" + "\n".join(map(str, range(12))) + "\n… (18 more lines)\n"
        "answer: Done!\n"
        "[final: 10 prompt + 5 completion tokens, 2 steps]\n"
    )


def test_reasoning_hidden_and_colour() -> None:
    assert "think" not in _show(show_reasoning=False)
    coloured = _show(color=True)
    assert "\x1b[2mthinking: \x1b[0m\x1b[2mLet me \x1b[0m" in coloured
    assert "\x1b[32manswer: \x1b[0mDone" in coloured
