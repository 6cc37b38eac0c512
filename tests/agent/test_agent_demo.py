"""examples/agent_demo.py: offline, real tools, a cited answer; a fallback without the sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "agent_demo.py"


def _demo(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        env={**env, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_demo_shows_real_tools_and_a_cited_answer() -> None:
    pytest.importorskip("jupyter_client", reason="the python tool needs harmonia[python]")
    from harmonia.tools.python import sandbox_status

    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"the python sandbox cannot start here: {status.reason}")
    out = _demo(dict(os.environ))
    assert out.startswith("scripted engine: the model's words are replayed, the tools are real")
    # Real outputs: the corpus page's own line, and the kernel's arithmetic.
    assert "L6: lunar day. A lunar day lasts 24 hours and 50 minutes" in out
    assert f"← python\n{round(7 * 24 * 60 / 745, 2)}\n" in out
    corpus_url = (ROOT / "examples" / "corpus" / "tides.md").as_uri()
    assert f"25 minutes ([Tides]({corpus_url})) , so a tidal harbour sees about 13.53" in out
    assert "parses back to itself" in out


def test_without_the_sandbox_the_demo_says_why_and_goes_on() -> None:
    # No bwrap on PATH: the sandbox probe fails, as on a machine without bubblewrap.
    out = _demo({k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": "/nonexistent"})
    assert "python sandbox unavailable: " in out
    assert "→ python" not in out
    assert "about 13 or 14 high waters" in out and "([Tides](file://" in out
