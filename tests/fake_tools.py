"""What the fake tool runtimes of the agent and tools tests share.

Each fake follows the Tool protocol (``namespace``, ``namespace_config``, ``call``,
``aclose``) for one built-in namespace; this base gives it the namespace's
configuration, a record of its calls and a flag set when it is closed, so that a
test can check what the dispatcher or the loop sent it.
"""

from __future__ import annotations

from collections.abc import Callable

from harmonia import ToolNamespaceConfig
from harmonia.tools import ToolCall


class FakeRuntime:
    """A fake runtime's bookkeeping; a subclass sets ``namespace`` and ``config``."""

    namespace: str
    #: The namespace's configuration, as the real runtime declares it.
    config: Callable[[], ToolNamespaceConfig]

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.closed = False

    def namespace_config(self) -> ToolNamespaceConfig:
        return type(self).config()

    async def aclose(self) -> None:
        self.closed = True
