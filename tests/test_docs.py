"""The Python examples in the README and docs/ run, and print what they claim.

A comment line directly after a ``print(...)`` line is that print's expected
output (without the leading ``# ``).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        for n, match in enumerate(BLOCK.finditer(doc.read_text(encoding="utf-8"))):
            out.append((doc.name, n, match.group(1)))
    return out


def _expected_output(code: str) -> list[str]:
    lines = code.splitlines()
    expected = []
    for before, line in itertools.pairwise(lines):
        if before.lstrip().startswith("print(") and line.lstrip().startswith("# "):
            expected.append(line.lstrip()[2:])
    return expected


@pytest.mark.parametrize(("doc", "index", "code"), _blocks(), ids=lambda v: str(v)[:20])
def test_documented_example_runs(doc: str, index: int, code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{doc}[{index}]", "exec"), {"__name__": "__doc_example__"})
    expected = _expected_output(code)
    if expected:
        assert out.getvalue().splitlines()[-len(expected) :] == expected
