"""The built-in ``python`` tool: a stateful Jupyter kernel per session, sandboxed.

Needs the ``python`` extra (``harmonia._errors.install_hint("python")`` says how) and, for the
sandbox, Linux with bubblewrap. Importing this package starts nothing and
imports no Jupyter code; see docs/python-tool.md.
"""

from ._config import PythonToolConfig
from ._output import NO_OUTPUT
from ._sandbox import SandboxStatus, sandbox_status
from ._tool import IsolationMode, PythonTool, isolation_mode

__all__ = [
    "NO_OUTPUT",
    "IsolationMode",
    "PythonTool",
    "PythonToolConfig",
    "SandboxStatus",
    "isolation_mode",
    "sandbox_status",
]
