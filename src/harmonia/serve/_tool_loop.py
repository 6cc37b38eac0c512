"""The plug for built-in tools (kept free of web-framework imports)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._agent_driver import Turn

JsonDict = dict[str, Any]


@runtime_checkable
class ToolLoop(Protocol):
    """The plug for built-in tools: runs a whole turn, executing browser/python calls itself.

    Called for a Responses request that declares ``web_search*`` or
    ``code_interpreter`` tools, once the request holds an admission slot.
    ``turn`` (a :class:`~harmonia.serve.Turn`) has the engine, the encoding,
    the conversation, the prompt ids, the sampling and the constraint, and
    ``turn.drive(toolbox)`` runs it through harmonia's agent driver, yielding
    the stream's events. A loop of its own feeds every sampled id to
    ``turn.stream`` and yields what ``stream.feed_many`` / ``stream.finish``
    return (so the last batch ends with ``response.completed``). Cancelling
    the iteration (a client that left) must cancel its generation.

    A loop may also have ``check(tool_types)``, called with the request's
    built-in tool types before the response starts: raising
    :class:`~harmonia.serve.APIError` there refuses the request (say, a 400
    for a sandbox that cannot start). :class:`~harmonia.serve.AgentToolLoop`
    is the loop harmonia ships.
    """

    def run(self, turn: Turn) -> AsyncIterator[list[JsonDict]]: ...
