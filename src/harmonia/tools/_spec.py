"""What the built-in tools are built from: :class:`ToolsSpec`, shared by every command.

``harmonia chat`` and ``harmonia serve`` pick tools (``--browser``, ``--python``);
``harmonia tools browser|python`` and ``tools serve-mcp`` run one. Each field is a
command-line option (``harmonia._options.add_options``) in the commands whose kind
its ``scope`` names, so a flag means the same thing and has the same default
wherever it appears, and a new setting is one new field here.

Scopes: ``pick`` (commands that choose an agent's tools), ``browser`` (those that
build a browser backend), ``python`` (those that run the python tool as such) and
``functions`` (``chat``, which loads ``@function_tool`` modules).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import InputError
from .._names import BROWSER, PYTHON
from .._options import flag_of, flag_words, option
from .._runtime import TIMEOUTS
from ._dispatch import Toolbox
from ._functions import FunctionTool, FunctionTools

if TYPE_CHECKING:
    from .browser import Backend
    from .python import PythonToolConfig

#: The scopes of the commands: which tool options each takes.
CHAT_SCOPE = ("pick", "browser", "functions")
SERVE_SCOPE = ("pick", "browser")
BROWSER_SCOPE = ("browser",)
PYTHON_SCOPE = ("python",)
MCP_SCOPE = ("browser", "python")

_WEB = ("exa", "you")


@dataclass(frozen=True)
class ToolsSpec:
    """The built-in tools' settings; :meth:`build` makes an agent's toolbox."""

    browser: str | None = option(
        None,
        help="the browser's backend: a folder of Markdown, text or HTML files, or web search "
        "with exa (EXA_API_KEY) or you (YDC_API_KEY) (default: none, no browser)",
        metavar="DIR|exa|you",
        scope=BROWSER_SCOPE,
    )
    browser_index: str = option(
        ":memory:",
        help="--browser DIR: an SQLite file that keeps the folder's index between runs "
        "(:memory: indexes the folder again each run)",
        metavar="FILE",
        scope=BROWSER_SCOPE,
    )
    python: bool = option(
        False,
        help="offer the python tool, run in the bubblewrap sandbox (default: off)",
        scope=("pick",),
    )
    functions: str | None = option(
        None,
        help="a module (dotted name or .py file) whose @function_tool functions to offer",
        metavar="MODULE",
        scope=("functions",),
    )
    timeout: float | None = option(
        None,
        help=f"seconds per python call (default: the tool's, {TIMEOUTS.python_call:g})",
        metavar="SECONDS",
        scope=PYTHON_SCOPE,
    )
    dangerously_allow_unsandboxed: bool = option(
        False,
        help="run python kernels without the sandbox where bubblewrap cannot start (unsafe)",
        scope=PYTHON_SCOPE,
    )

    def backend(self, *, index: bool = False) -> Backend:
        """The browser backend ``--browser`` names; ``index``: index a folder now."""
        from .browser import ExaBackend, LocalCorpusBackend, YouComBackend

        if self.browser is None:
            raise InputError("the browser needs --browser DIR|exa|you: a folder or web search")
        if self.browser in _WEB:
            return ExaBackend() if self.browser == "exa" else YouComBackend()
        if not Path(self.browser).is_dir():
            raise InputError(
                f"--browser {self.browser}: not a folder; give a folder of Markdown, text or "
                "HTML files, or exa or you for web search"
            )
        backend = LocalCorpusBackend(self.browser, database=self.browser_index)
        if index:
            backend.index()
        return backend

    def python_config(self) -> PythonToolConfig:
        from .python import PythonToolConfig

        settings: dict[str, Any] = {
            "dangerously_allow_unsandboxed": self.dangerously_allow_unsandboxed
        }
        if self.timeout is not None:
            settings["timeout"] = self.timeout
        try:
            return PythonToolConfig(**settings)
        except InputError as exc:  # said with the flag that was given
            names = {"PythonToolConfig.timeout": flag_of(ToolsSpec, "timeout")}
            raise InputError(flag_words(str(exc), names)) from None

    def check(self) -> None:
        """Refuse settings that cannot run here, saying how (``chat`` and ``serve`` alike)."""
        if self.python and not self.dangerously_allow_unsandboxed:
            from .python import sandbox_status

            status = sandbox_status()
            if not status.ok:
                raise InputError(
                    f"--python: the sandbox cannot start here: {status.reason}; install "
                    "bubblewrap (bwrap) where unprivileged user namespaces are allowed, or "
                    "leave out --python"
                )

    def build(
        self, *, backend: Backend | None = None, builtins: Collection[str] | None = None
    ) -> Toolbox:
        """The toolbox the settings ask for: ``chat``'s, and each of ``serve``'s responses'.

        ``backend``: a browser backend shared with other toolboxes, left open (without
        it a ``--browser`` folder is indexed now, so a bad file is reported at start-up).
        ``builtins``: only these of ``browser`` and ``python`` (``None``: all named).
        """
        self.check()
        box = Toolbox()
        wanted = (BROWSER, PYTHON) if builtins is None else tuple(builtins)
        if BROWSER in wanted and (backend is not None or self.browser is not None):
            from .browser import BrowserTool

            if backend is None:
                box.add(BrowserTool(self.backend(index=True)))
            else:
                box.add(BrowserTool(backend, owns_backend=False))
        if self.python and PYTHON in wanted:
            from .python import PythonTool

            box.add(PythonTool(self.python_config()))
        if self.functions:
            box.add(FunctionTools(load_functions(self.functions)))
        return box


def load_functions(spec: str) -> list[FunctionTool[Any, Any]]:
    """The ``@function_tool`` functions of a module (a dotted name or a ``.py`` file)."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"--functions {spec}: no such file")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise InputError(f"--functions {spec}: cannot load it as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(path.stem, module)
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(spec)
        except ImportError as exc:
            raise InputError(f"--functions {spec}: cannot import it ({exc})") from None
    found = [v for v in vars(module).values() if isinstance(v, FunctionTool)]
    if not found:
        raise InputError(
            f"--functions {spec}: the module defines no function tools; "
            "decorate them with @harmonia.tools.function_tool"
        )
    return found
