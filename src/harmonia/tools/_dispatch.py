"""One dispatch for every tool call: find the runtime, run it, answer on the caller's channel.

:class:`Toolbox` holds runtimes by namespace. ``dispatch(message)`` resolves
the message's recipient (aliases included, see :mod:`._route`), runs the call
with a timeout and returns the reply the guide shows::

    <|start|>{tool} to=assistant<|channel|>{channel}<|message|>{output}<|end|>

Every failure (an unknown tool, arguments the runtime rejects, an exception in
the tool, a timeout) becomes such a reply, with text the model can act on.
Calls to namespaces the caller declared with :meth:`Toolbox.declare` are not
run: ``dispatch`` returns ``None`` and the caller answers them itself (as a
Chat Completions client answers ``tool_calls``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Literal

from .. import (
    Author,
    InputError,
    InputTypeError,
    Message,
    Role,
    TextContent,
    ToolError,
    ToolNamespaceConfig,
)
from .._names import ASSISTANT, BUILTIN_NAMESPACES
from .._runtime import TIMEOUTS, ClosedOnExit, run_sync
from .._turn import is_call
from ._base import Tool, ToolCall, ToolOutput
from ._functions import FunctionTool, FunctionTools
from ._route import resolve_recipient

logger = logging.getLogger("harmonia.tools")

#: Seconds a call may run before the dispatcher cancels it and answers with a
#: timeout (``harmonia._runtime.TIMEOUTS``, the one table of defaults).
DEFAULT_TIMEOUT = TIMEOUTS.tool_call

# An exception's text is quoted to the model up to this many characters.
_EXCEPTION_QUOTE_LIMIT = 500


class Toolbox(ClosedOnExit):
    """Runtimes by namespace, their declarations, and the dispatch of calls to them.

    >>> box = Toolbox()
    >>> box.declare(ToolNamespaceConfig("functions", None, []))
    >>> box.namespaces
    ['functions']
    """

    def __init__(
        self,
        tools: Iterable[Tool | FunctionTool[..., Any]] = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
    ):
        self._tools: dict[str, Tool] = {}
        self._timeouts: dict[str, float | None] = {}
        self._declared: dict[str, ToolNamespaceConfig] = {}
        self.timeout = timeout
        # Bare @function_tool functions share one `functions` runtime.
        functions: list[FunctionTool[..., Any]] = []
        for tool in tools:
            if isinstance(tool, FunctionTool):
                functions.append(tool)
            else:
                self.add(tool)
        if functions:
            self.add(FunctionTools(functions))

    def add(
        self,
        tool: Tool | FunctionTool[..., Any],
        *,
        timeout: float | Literal["default"] | None = "default",
    ) -> None:
        """Register a runtime; ``timeout`` (seconds, ``None``: none) overrides the toolbox's."""
        if isinstance(tool, FunctionTool):
            tool = FunctionTools([tool])
        if not isinstance(tool, Tool):
            raise InputTypeError(
                f"a toolbox holds tool runtimes (harmonia.tools.Tool), not "
                f"{type(tool).__name__}: wrap functions with @function_tool"
            )
        self._tools[self._free(tool.namespace)] = tool
        if timeout != "default":
            self._timeouts[tool.namespace] = timeout

    def declare(self, config: ToolNamespaceConfig) -> None:
        """Declare a namespace whose calls the caller runs: ``dispatch`` returns ``None``."""
        self._declared[self._free(config.name)] = config

    def _free(self, namespace: str) -> str:
        """``namespace``, once checked that neither a runtime nor a declaration holds it."""
        if namespace in self._tools or namespace in self._declared:
            raise InputError(f"namespace {namespace!r} is already registered in this toolbox")
        return namespace

    @property
    def namespaces(self) -> list[str]:
        """Every namespace, run here or declared for the caller."""
        return [*self._tools, *self._declared]

    def tool(self, namespace: str) -> Tool | None:
        """The runtime serving ``namespace``, if any."""
        return self._tools.get(namespace)

    def namespace_configs(self) -> list[ToolNamespaceConfig]:
        """Every namespace's declaration, runtimes first, in registration order."""
        configs = [tool.namespace_config() for tool in self._tools.values()]
        return configs + list(self._declared.values())

    def system_tools(self) -> list[ToolNamespaceConfig]:
        """The built-ins (``browser``, ``python``): they go into the system message."""
        return [c for c in self.namespace_configs() if c.name in BUILTIN_NAMESPACES]

    def developer_tools(self) -> list[ToolNamespaceConfig]:
        """``functions`` and every other namespace: they go into the developer message."""
        return [c for c in self.namespace_configs() if c.name not in BUILTIN_NAMESPACES]

    def parse_call(self, message: Message, *, call_id: str | None = None) -> ToolCall:
        """The :class:`ToolCall` a message makes; :class:`harmonia.InputError` if it makes none."""
        if not is_call(message):
            raise InputError(
                f"message with recipient {message.recipient!r} on channel "
                f"{message.channel!r} is not a tool call; check is_tool_call(message) "
                "before dispatching (a bare function name needs the commentary channel, "
                "or write functions.NAME)"
            )
        assert message.recipient is not None
        # Only aliases need the declarations' function names; most calls never read them.
        names = _LazyNames(self.namespace_configs)
        canonical, namespace, name = resolve_recipient(message.recipient, self.namespaces, names)
        text, channel, content_type = message.text, message.channel, message.content_type
        return ToolCall(canonical, namespace, name, text, channel, content_type, call_id)

    def owns(self, call: ToolCall) -> bool:
        """Whether the toolbox runs this call (``False`` for declared namespaces)."""
        return call.namespace not in self._declared

    async def run(self, call: ToolCall) -> ToolOutput:
        """Run one call and return its output; never raises (but passes cancellation on)."""
        tool = self._tools.get(call.namespace)
        if tool is None:
            return _error(self._unknown(call))
        timeout = self._timeouts.get(call.namespace, self.timeout)
        try:
            return await asyncio.wait_for(tool.call(call), timeout)
        except ToolError as exc:
            return _error(f"Error: {exc}")
        except asyncio.TimeoutError:
            return _error(
                f"Error: {call.recipient} did not answer within {timeout:g} seconds and was "
                "cancelled. Try a smaller or simpler request."
            )
        except Exception as exc:  # a runtime's bug must not end the caller's loop
            logger.warning("tool %s raised", call.recipient, exc_info=True)
            text = str(exc)[:_EXCEPTION_QUOTE_LIMIT]
            return _error(f"Error: {call.recipient} failed: {type(exc).__name__}: {text}")

    async def dispatch(self, message: Message, *, call_id: str | None = None) -> Message | None:
        """Run the call ``message`` makes and return :func:`tool_reply`; ``None`` if declared."""
        call = self.parse_call(message, call_id=call_id)
        if not self.owns(call):
            return None
        return tool_reply(call, await self.run(call))

    def dispatch_sync(self, message: Message, *, call_id: str | None = None) -> Message | None:
        """:meth:`dispatch` for synchronous callers (not from inside a running event loop)."""
        return run_sync(
            lambda: self.dispatch(message, call_id=call_id),
            "dispatch_sync was called inside a running event loop; await dispatch()",
        )

    async def aclose(self) -> None:
        """Close every runtime (each is closed even when another fails)."""
        errors: list[BaseException] = []
        for tool in self._tools.values():
            try:
                await tool.aclose()
            except Exception as exc:  # close the others first, then report
                errors.append(exc)
        if errors:
            raise ToolError(f"closing a tool runtime failed: {errors[0]!r}") from errors[0]

    async def __aenter__(self) -> Toolbox:
        return self

    def _unknown(self, call: ToolCall) -> str:
        valid: list[str] = []
        for config in self.namespace_configs():
            if config.tools:
                valid.extend(f"{config.name}.{t.name}" for t in config.tools)
            else:
                valid.append(config.name)
        listed = ", ".join(valid) if valid else "none"
        return f"Error: there is no tool {call.recipient!r}. Valid tools: {listed}."


def is_tool_call(message: Message) -> bool:
    """Whether ``message`` is an assistant message addressed to a tool.

    The reading is :func:`harmonia._turn.is_call`'s, shared by the server's stream,
    ``Toolbox.parse_call`` and the training masks.

    >>> call = Message.from_role_and_content(Role.ASSISTANT, "{}").with_recipient("functions.f")
    >>> is_tool_call(call), is_tool_call(Message.from_role_and_content(Role.USER, "hi"))
    (True, False)
    """
    return is_call(message)


def tool_reply(call: ToolCall | Message, output: ToolOutput | str) -> Message:
    """The reply to ``call`` (a call or its message): from the tool, on the call's channel.

    >>> call = ToolCall("python", "python", None, "print(1)", channel="analysis")
    >>> reply = tool_reply(call, "1\\n")
    >>> reply.author.name, reply.recipient, reply.channel, reply.text
    ('python', 'assistant', 'analysis', '1\\n')
    """
    text = output if isinstance(output, str) else output.text
    return Message(
        author=Author(Role.TOOL, call.recipient),
        content=[TextContent(text)],
        channel=call.channel,
        recipient=ASSISTANT,
    )


class _LazyNames(Mapping[str, Collection[str]]):
    """Function names by namespace, read from the declarations on first use."""

    def __init__(self, configs: Callable[[], list[ToolNamespaceConfig]]) -> None:
        self._configs = configs
        self._names: dict[str, list[str]] | None = None

    def _load(self) -> dict[str, list[str]]:
        if self._names is None:
            self._names = {c.name: [t.name for t in c.tools] for c in self._configs()}
        return self._names

    def __getitem__(self, key: str) -> Collection[str]:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def _error(text: str) -> ToolOutput:
    return ToolOutput(text=text, is_error=True)
