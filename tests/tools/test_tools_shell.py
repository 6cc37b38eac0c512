"""``harmonia tools browser search|open|find`` and ``harmonia tools python`` from a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def harmonia(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harmonia", "tools", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=300,  # a hang guard
    )


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "tides.md").write_text(
        "# Tides\n\nA lunar day lasts 24 hours and 50 minutes.\nThe moon pulls the sea.\n",
        encoding="utf-8",
    )
    return folder


def test_browser_search_open_and_find(corpus: Path) -> None:
    found = harmonia("browser", "search", "lunar day", "--browser", str(corpus))
    assert found.returncode == 0, found.stderr
    assert "【0†Tides】" in found.stdout and "# Search Results" in found.stdout
    opened = harmonia("browser", "open", "tides.md", "--browser", str(corpus))
    assert opened.returncode == 0, opened.stderr
    assert "L2: A lunar day lasts 24 hours and 50 minutes." in opened.stdout
    hits = harmonia("browser", "find", "moon", "--url", "tides.md", "--browser", str(corpus))
    assert hits.returncode == 0 and "The moon pulls the sea." in hits.stdout


def test_browser_failures_are_one_line_and_exit_1(corpus: Path) -> None:
    missing = harmonia("browser", "open", "nope.md", "--browser", str(corpus))
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("harmonia tools browser open: Error fetching URL")
    neither = harmonia("browser", "search", "x")
    assert neither.returncode == 1
    assert "needs --browser DIR|exa|you" in neither.stderr


def test_python_runs_code_in_the_sandbox() -> None:
    pytest.importorskip("jupyter_client", reason="the python extra (jupyter_client) is missing")
    from harmonia.tools.python import sandbox_status

    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"the python tool's sandbox cannot start here: {status.reason}")
    result = harmonia("python", "-", stdin="print(6 * 7)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42"
    failed = harmonia("python", "1 / 0")
    assert "ZeroDivisionError" in failed.stdout + failed.stderr
