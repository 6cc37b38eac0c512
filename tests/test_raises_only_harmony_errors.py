"""``_errors.py`` promises that every error harmonia raises is a ``HarmonyError``.

This walks every module under ``src/harmonia`` and fails on a ``raise`` of a
built-in exception class (``raise ValueError(...)``, ``raise TypeError``, ...).
Re-raising (``raise``, ``raise exc``) is fine. The few exceptions below are
required by a Python protocol or never reach a caller, each with its reason.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)

#: (module path under src/harmonia, exception) -> why it is allowed.
ALLOWED = {
    ("_content.py", "NotImplementedError"): "the abstract Content.to_dict; subclasses override it",
    ("__init__.py", "AttributeError"): "a module __getattr__ (the lazy __version__) must raise "
    "AttributeError",
    ("constrained/vllm.py", "AttributeError"): "a module __getattr__ must raise AttributeError",
    ("_parse/header.py", "IndexError"): "an internal signal: header_strict catches it and "
    "reports the header as undecodable",
    ("_parse/content.py", "AssertionError"): "unreachable (pragma: no cover); a broken invariant",
    ("tools/python/_launcher.py", "SystemExit"): "runs inside the sandbox as a standalone "
    "script before the kernel starts: exiting with a message is how it fails",
    ("engines/_generation.py", "StopAsyncIteration"): "the async iterator protocol ends "
    "iteration with it",
}


def builtin_raises(source: str) -> list[tuple[int, str]]:
    """(line, exception name) of every ``raise`` of a built-in exception class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in BUILTIN_EXCEPTIONS:
                found.append((node.lineno, raised.id))
    return sorted(found)


def test_harmonia_raises_only_harmony_errors() -> None:
    problems = []
    seen_allowed = set()
    for path in sorted((SRC / "harmonia").rglob("*.py")):
        module = path.relative_to(SRC / "harmonia").as_posix()
        for line, name in builtin_raises(path.read_text(encoding="utf-8")):
            if (module, name) in ALLOWED:
                seen_allowed.add((module, name))
            else:
                problems.append(f"src/harmonia/{module}:{line} raises {name}")
    assert problems == [], "raise a HarmonyError subclass (see _errors.py) instead"
    # An allowance that no longer matches anything must go.
    assert seen_allowed == set(ALLOWED)


def test_the_check_sees_builtin_raises_and_ignores_re_raises() -> None:
    source = (
        "def f(x):\n"
        "    if x:\n"
        "        raise ValueError('bad')\n"
        "    try:\n"
        "        pass\n"
        "    except KeyError as exc:\n"
        "        raise\n"
        "    except OSError as exc:\n"
        "        raise exc\n"
        "    raise TypeError\n"
        "    raise InputError('fine')\n"
    )
    assert builtin_raises(source) == [(3, "ValueError"), (10, "TypeError")]
