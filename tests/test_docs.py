"""The Python examples in the README and docs/ run, and print what they claim.

Blocks fenced as ``python`` run; a block fenced as ``py`` is a sketch that needs
something the test machine has not got (an API key, a folder of your own) and
is only shown. A comment line directly after a ``print(...)`` line is that print's expected
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


def _docs_with_code() -> list[tuple[str, list[str]]]:
    out = []
    for doc in DOCS:
        blocks = [m.group(1) for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]
        if blocks:
            out.append((doc.name, blocks))
    return out


def _expected_output(code: str) -> list[str]:
    lines = code.splitlines()
    expected = []
    for before, line in itertools.pairwise(lines):
        if before.lstrip().startswith("print(") and line.lstrip().startswith("# "):
            expected.append(line.lstrip()[2:])
    return expected


@pytest.mark.parametrize(("doc", "blocks"), _docs_with_code(), ids=lambda v: str(v)[:20])
def test_documented_examples_run(
    doc: str, blocks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page is read top to bottom, so its blocks run in order in one namespace
    # (a later block may use what an earlier one defined), as in a notebook.
    # In an empty directory: what an example writes (a store, an index) must not
    # land in the checkout.
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    for index, code in enumerate(blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{doc}[{index}]", "exec"), namespace)
        expected = _expected_output(code)
        if expected:
            assert out.getvalue().splitlines()[-len(expected) :] == expected, f"{doc}[{index}]"
