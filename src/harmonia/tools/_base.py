"""What every tool runtime implements, and the call and output it exchanges.

A tool runtime owns one harmony namespace (``browser``, ``python``,
``functions``, or any other the caller declares). The dispatcher
(:mod:`harmonia.tools._dispatch`) reads an assistant message addressed to a
tool, normalises it into a :class:`ToolCall`, hands it to the runtime that owns
the namespace, and wraps the :class:`ToolOutput` into the reply message the
guide shows (``<|start|>{recipient} to=assistant<|channel|>{channel}<|message|>...``).

Runtimes are async first: ``call`` may run a kernel, query a database or an
HTTP backend. A runtime signals a problem the model caused or can fix (bad
arguments, an out-of-range cursor) by raising :class:`harmonia.ToolError` with a
message written for the model; the dispatcher turns that, and any other
exception, into a reply, so nothing escapes the caller's loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._content import ToolNamespaceConfig


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made, normalised.

    ``recipient`` is canonical (``"browser.search"``, ``"python"``,
    ``"functions.get_weather"``) even when the model wrote an alias such as
    ``functions.browser.search``; ``namespace`` is its first part and ``name``
    the rest (``None`` for a namespace called as a whole, like ``python``).
    ``arguments`` is the message body exactly as sampled (JSON for functions and
    the browser, source code for python); ``channel`` and ``content_type`` are
    the call's header fields, and ``call_id`` an identifier the caller may set
    to match replies to calls.
    """

    recipient: str
    namespace: str
    name: str | None
    arguments: str
    channel: str | None = None
    content_type: str | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a runtime returns for one call.

    ``text`` is the reply body the model reads. ``metadata`` carries what a
    caller may want beside it and the model never sees (the browser's page
    URL and title for citations, paths of images the python tool saved, ...).
    ``is_error`` marks a reply that reports a failure.
    """

    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    is_error: bool = False


@runtime_checkable
class Tool(Protocol):
    """The least a tool runtime implements."""

    @property
    def namespace(self) -> str:
        """The harmony namespace this runtime serves (``"browser"``, ``"python"``, ...)."""

    def namespace_config(self) -> ToolNamespaceConfig:
        """The declaration rendered into the system (built-ins) or developer message."""

    async def call(self, call: ToolCall) -> ToolOutput:
        """Run one call; raise :class:`harmonia.ToolError` for problems the model can fix."""

    async def aclose(self) -> None:
        """Release what the runtime holds (kernels, connections, files)."""
