"""The examples in docs/browser.md run and print what the page says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from harmonia.tools.browser import fts5_available

DOC = Path(__file__).resolve().parents[3] / "docs" / "browser.md"


@pytest.mark.skipif(not fts5_available(), reason="the example's corpus needs SQLite FTS5")
def test_docs_examples_print_what_the_docs_show() -> None:
    text = DOC.read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.S)
    shown = re.findall(r"prints[^\n]*\n\n```\n(.*?)```", text, re.S)
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in code[:3]:  # the corpus example, the declaration, the stream
            exec(compile(block, str(DOC), "exec"), namespace)
    root = namespace["root"]
    assert isinstance(root, Path)
    printed = out.getvalue().replace(root.as_uri(), "file:///tmp/tmpabc123")
    assert printed == "".join(shown)
