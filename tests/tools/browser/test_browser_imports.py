"""Importing the browser package stays light: no lxml, html2text or httpx until used."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_load_optional_dependencies() -> None:
    code = (
        "import sys, harmonia.tools.browser as b; "
        "print(sorted(m for m in ('lxml', 'html2text', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
