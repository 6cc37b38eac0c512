"""The plug for built-in tools (kept free of web-framework imports)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..engines import SamplingParams
    from ..openai_compat import ResponseStream
    from ._service import Prepared, Service

JsonDict = dict[str, Any]


@runtime_checkable
class ToolLoop(Protocol):
    """The plug for built-in tools: runs a whole turn, executing browser/python calls itself.

    Called for a Responses request that declares ``web_search*`` or
    ``code_interpreter`` tools, once the request holds an admission slot.
    ``service.engine`` and ``service.enc`` are the engine and encoding;
    ``prepared`` has the conversation, the prompt ids and the constraint. The
    loop generates, runs each built-in call it parses, renders the tool's
    reply into the token context and continues, feeding every sampled id to
    ``stream`` and yielding what ``stream.feed_many`` / ``stream.finish``
    return (so the last batch ends with ``response.completed``). Cancelling
    the iteration (a client that left) must cancel its generation.

    A loop may also have ``check(tool_types)``, called with the request's
    built-in tool types before the response starts: raising
    :class:`~harmonia.serve.APIError` there refuses the request (say, a 400
    for a sandbox that cannot start). :class:`~harmonia.serve.AgentToolLoop`
    is the loop harmonia ships.
    """

    def run(
        self, service: Service, prepared: Prepared, params: SamplingParams, stream: ResponseStream
    ) -> AsyncIterator[list[JsonDict]]: ...
