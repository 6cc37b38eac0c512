"""The built-in tools on the server: a :class:`ToolLoop` over ``harmonia.agent``'s driver.

Each response gets its own runtimes (a :class:`~harmonia.tools.browser.BrowserTool`
with its own pages, a python kernel), closed when the response ends, however
it ends. The turn runs through :meth:`~harmonia.serve.Turn.drive` with them,
so calls to ``browser.*`` and ``python`` become ``web_search_call`` /
``code_interpreter_call`` items and a call to a client function ends the
response with a ``function_call`` item.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harmonia import HarmonyError
from harmonia.vocabulary import BROWSER, FUNCTIONS, PYTHON

from ..openai_compat import ResponseStream
from ._errors import APIError

if TYPE_CHECKING:
    from harmonia.agent import AgentLimits
    from harmonia.tools import Toolbox, ToolsSpec
    from harmonia.tools.browser import Backend, BrowserTool

    from ._agent_driver import Turn

JsonDict = dict[str, Any]

_SEARCH_TYPES = ("web_search", "web_search_preview")


class AgentToolLoop:
    """Runs ``web_search*`` over a browser backend and ``code_interpreter`` in the sandbox.

    * ``browser``: the search backend, shared by every response (each gets its
      own pages); the caller owns it and closes it (``None``: no ``web_search``;
      the tool is left out of such requests);
    * ``python``: run ``code_interpreter`` calls in harmonia's sandboxed
      python tool (left out of requests, the log saying why, when the sandbox cannot start);
    * ``limits``: the agent's :class:`~harmonia.agent.AgentLimits` per response;
    * ``tools``: the python tool's settings (``harmonia.tools.ToolsSpec``, what
      ``harmonia serve`` reads from its flags); each response's toolbox is built by
      ``ToolsSpec.build``, the builder ``harmonia chat`` uses too.

    .. code-block:: python

        from harmonia.serve import AgentToolLoop, create_app
        from harmonia.tools.browser import LocalCorpusBackend

        loop = AgentToolLoop(browser=LocalCorpusBackend("notes/"), python=True)
        app = create_app(engine, tool_loop=loop)
    """

    def __init__(
        self,
        *,
        browser: Backend | None = None,
        python: bool = False,
        limits: AgentLimits | None = None,
        tools: ToolsSpec | None = None,
    ) -> None:
        from harmonia.tools import ToolsSpec

        self.browser = browser
        self.python = python
        self.limits = limits
        self.tools = ToolsSpec() if tools is None else tools

    def check(self, tool_types: Sequence[str]) -> None:
        """Refuse (a 400) a request whose built-in tools this server cannot run."""
        if self.browser is None and any(t in _SEARCH_TYPES for t in tool_types):
            raise APIError(
                400,
                "this server has no search backend for web_search: start it with "
                "--browser DIR|exa|you, or declare a function tool instead",
                param="tools",
                code="unsupported_tool",
            )
        if "code_interpreter" in tool_types:
            why = self.python_unavailable()
            if why is not None:
                raise APIError(400, why, param="tools", code="unsupported_tool")

    def python_unavailable(self) -> str | None:
        """Why ``code_interpreter`` cannot run here, or ``None`` when it can."""
        if not self.python:
            return (
                "this server does not run code_interpreter: start it with --python (needs "
                "the python extra and a bubblewrap sandbox)"
            )
        try:
            from harmonia.tools.python import sandbox_status
        except ImportError as exc:  # pragma: no cover - the python extra is missing
            return f"code_interpreter needs harmonia[python]: {exc}"
        status = sandbox_status()
        if not status.ok:
            return f"code_interpreter is unavailable on this server: {status.reason}"
        return None

    def _toolbox(self, tool_types: Sequence[str]) -> tuple[Toolbox, BrowserTool | None]:
        from harmonia import ToolNamespaceConfig

        builtins = []
        if self.browser is not None and any(t in _SEARCH_TYPES for t in tool_types):
            builtins.append(BROWSER)
        if self.python and "code_interpreter" in tool_types:
            builtins.append(PYTHON)
        # ``check`` refused a python request the sandbox cannot run: nothing to refuse here.
        spec = replace(self.tools, python=PYTHON in builtins, functions=None)
        box = spec.build(backend=self.browser, builtins=builtins)  # the shared backend stays open
        # The client's functions are declared but not run here: such a call ends the
        # response with a function_call item, for the client to answer.
        box.declare(ToolNamespaceConfig(FUNCTIONS, None, []))
        return box, box.tool(BROWSER)  # type: ignore[return-value]  # a BrowserTool

    async def run(self, turn: Turn) -> AsyncIterator[list[JsonDict]]:
        """One response: sample, run the built-in calls, until an answer or a client call."""
        tools = turn.stream.request.get("tools") if isinstance(turn.stream, ResponseStream) else []
        tool_types = [str(t.get("type")) for t in tools or () if isinstance(t, dict)]
        self.check(tool_types)
        toolbox, browser_tool = self._toolbox(tool_types)
        try:
            async for batch in turn.drive(toolbox, browser=browser_tool, limits=self.limits):
                yield batch
        finally:
            # A client that left, a cancel or the end: the kernel and the pages go.
            try:
                await toolbox.aclose()
            except HarmonyError as exc:  # the response is over: log it, do not mask it
                logging.getLogger("harmonia.serve").warning("closing the tools failed: %s", exc)
