"""How a turn's end becomes Chat's ``finish_reason`` and a response's ``status``.

The turn layer says how the output ended (:class:`~harmonia.TurnSummary`); an
output without a stop token was cut off, so Chat answers ``length`` and
Responses ``incomplete`` (``max_output_tokens``). A caller whose engine stopped
for a reason the tokens cannot show (a content filter) passes it explicitly.
"""

from __future__ import annotations

from typing import Final

from .._errors import InputError
from .._turn import TurnSummary

#: The ``finish_reason`` values Chat Completions defines.
CHAT_FINISH_REASONS: Final = ("stop", "length", "tool_calls", "content_filter", "function_call")
#: The ``incomplete_details.reason`` values the Responses API defines.
INCOMPLETE_REASONS: Final = ("max_output_tokens", "content_filter")


def _checked(name: str, allowed: tuple[str, ...], value: str | None) -> str | None:
    if value is not None and value not in allowed:
        raise InputError(
            f"{name} must be one of {', '.join(allowed)} "
            f"(or None to read it from the tokens), not {value!r}"
        )
    return value


def checked_finish_reason(value: str | None) -> str | None:
    """An explicit Chat ``finish_reason``, checked (``None``: read it from the tokens)."""
    return _checked("finish_reason", CHAT_FINISH_REASONS, value)


def checked_incomplete_reason(value: str | None) -> str | None:
    """An explicit Responses incomplete reason, checked (``None``: read it from the tokens)."""
    return _checked("incomplete_reason", INCOMPLETE_REASONS, value)


def finish_reason(summary: TurnSummary, override: str | None = None) -> str:
    """``length`` when cut off, else ``tool_calls`` when there are calls, else ``stop``;
    ``override`` (checked by :func:`checked_finish_reason`) wins."""
    if override is not None:
        return override
    if summary.truncated:
        return "length"
    return "tool_calls" if summary.calls else "stop"


def response_status(summary: TurnSummary, override: str | None = None) -> tuple[str, str | None]:
    """(``status``, incomplete reason) of a finished response."""
    if override is not None:
        return "incomplete", override
    if summary.truncated:
        return "incomplete", "max_output_tokens"
    return "completed", None
