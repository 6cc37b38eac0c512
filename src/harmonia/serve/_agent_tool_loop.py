"""The built-in tools on the server: a :class:`ToolLoop` driving ``harmonia.agent``'s loop.

Each response gets its own runtimes (a :class:`~harmonia.tools.browser.BrowserTool`
with its own pages, a python kernel), closed when the response ends, however
it ends. The sans-IO :class:`~harmonia.agent.AgentLoop` decides what happens
next; this driver samples, runs the tool calls the toolbox owns, and feeds
every sampled id to the response stream, so calls to ``browser.*`` and
``python`` become ``web_search_call`` / ``code_interpreter_call`` items and a
call to a client function ends the response with a ``function_call`` item.

The stream reads one turn of output, so between two generations the driver
feeds it the ``<|start|>assistant`` header the prompt ended with (the usage
is then taken from the loop, which counts what the engine did). The events
are renumbered here because this driver adds some: a built-in call's
``completed`` waits for the tool, and an answer's citations of browser pages
become ``url_citation`` annotations (``response.output_text.annotation.added``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harmonia import HarmonyError, InputError

from ._errors import APIError

if TYPE_CHECKING:
    from harmonia.agent import AgentLimits
    from harmonia.engines import SamplingParams
    from harmonia.tools import Toolbox
    from harmonia.tools.browser import Backend, BrowserTool

    from ..openai_compat import ResponseStream
    from ._service import Prepared, Service

JsonDict = dict[str, Any]

_SEARCH_TYPES = ("web_search", "web_search_preview")


class AgentToolLoop:
    """Runs ``web_search*`` over a browser backend and ``code_interpreter`` in the sandbox.

    * ``browser``: the search backend, shared by every response (each gets its
      own pages); the caller owns it and closes it (``None``: no ``web_search``;
      the tool is left out of such requests);
    * ``python``: run ``code_interpreter`` calls in harmonia's sandboxed
      python tool (left out of requests, the log saying why, when the sandbox cannot start);
    * ``limits``: the agent's :class:`~harmonia.agent.AgentLimits` per response.

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
    ) -> None:
        self.browser = browser
        self.python = python
        self.limits = limits

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
        from harmonia.tools import Toolbox

        tools: list[Any] = []
        browser_tool: BrowserTool | None = None
        if self.browser is not None and any(t in _SEARCH_TYPES for t in tool_types):
            from harmonia.tools.browser import BrowserTool

            browser_tool = BrowserTool(self.browser, owns_backend=False)  # shared: kept open
            tools.append(browser_tool)
        if self.python and "code_interpreter" in tool_types:
            from harmonia.tools.python import PythonTool

            tools.append(PythonTool())
        box = Toolbox(tools)
        # The client's functions are declared but not run here: such a call ends the
        # response with a function_call item, for the client to answer.
        box.declare(ToolNamespaceConfig("functions", None, []))
        return box, browser_tool

    async def run(
        self, service: Service, prepared: Prepared, params: SamplingParams, stream: ResponseStream
    ) -> AsyncIterator[list[JsonDict]]:
        """One response: sample, run the built-in calls, until an answer or a client call."""
        from ._agent_driver import Driver

        tool_types = [str(t.get("type")) for t in _request_tools(stream)]
        self.check(tool_types)
        toolbox, browser_tool = self._toolbox(tool_types)
        driver = Driver(service, prepared, params, stream, toolbox, browser_tool, self.limits)
        try:
            async for batch in driver.events():
                yield batch
        finally:
            # A client that left, a cancel or the end: the kernel and the pages go.
            try:
                await toolbox.aclose()
            except HarmonyError as exc:  # the response is over: log it, do not mask it
                logging.getLogger("harmonia.serve").warning("closing the tools failed: %s", exc)


def _request_tools(stream: ResponseStream) -> list[JsonDict]:
    tools = stream.request.get("tools") or []
    return [t for t in tools if isinstance(t, dict)]


def open_backend(spec: str) -> Backend:
    """The search backend ``harmonia serve --browser`` names: a folder, ``exa`` or ``you``.

    Web backends read their API key from the environment (``EXA_API_KEY``,
    ``YDC_API_KEY``); a folder is indexed once, in memory.
    """
    from harmonia.tools.browser import ExaBackend, LocalCorpusBackend, YouComBackend

    if spec == "exa":
        return ExaBackend()
    if spec == "you":
        return YouComBackend()
    if not Path(spec).is_dir():
        raise InputError(
            f"--browser {spec!r}: not a folder; give a folder of documents to search, "
            "'exa' or 'you'"
        )
    backend = LocalCorpusBackend(spec)
    backend.index()
    return backend
