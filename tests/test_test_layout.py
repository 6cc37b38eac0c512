"""The test tree's own rules: it mirrors the source tree and test modules import cleanly.

pytest imports test files in "prepend" mode, as top-level modules named after
their file: two test files with one name, or a test importing ``conftest``
(one of several), break collection or import the wrong module.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _python_files() -> list[Path]:
    return [p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts]


def test_module_names_are_unique_across_the_test_tree() -> None:
    names = Counter(p.name for p in _python_files() if p.name != "conftest.py")
    assert [name for name, n in names.items() if n > 1] == []


def test_no_test_module_imports_conftest() -> None:
    offenders = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if "conftest" in names:
                offenders.append(str(path.relative_to(TESTS)))
    assert offenders == [], "move shared helpers into a uniquely named helper module"
