from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

import harmonia


@pytest.fixture(scope="session")
def enc() -> harmonia.HarmonyEncoding:
    return harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)


@pytest.fixture(scope="session")
def ref_enc() -> Any:
    """The reference library's (``openai_harmony``) encoding, for the differential tests.

    The reference would download its vocabulary; offline it reads the file we write
    (``TIKTOKEN_ENCODINGS_BASE``) unless one is already set up.
    """
    ref: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
    if not (Path(os.environ.get("TIKTOKEN_ENCODINGS_BASE", "")) / "o200k_base.tiktoken").exists():
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = os.path.dirname(
            harmonia.write_tiktoken_file(tempfile.mkdtemp())
        )
    return ref.load_harmony_encoding(ref.HarmonyEncodingName.HARMONY_GPT_OSS)


# ``--doctest-modules`` would also import every conftest.py as a plain module
# named ``conftest`` to look for doctests; with conftest files in nested test
# folders (and no packages) those imports collide. Conftests hold no doctests.
collect_ignore_glob = ["conftest.py", "**/conftest.py"]


# CI's second pass installs every optional dependency and sets
# HARMONIA_NO_SKIPS=1: there a skipped test means a missing install step, not an
# optional feature, so the run fails and names the skipped tests. The README's
# plain `make test` leaves it unset and lists the skips with their reasons (-rs).
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import os

    if os.environ.get("HARMONIA_NO_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        names = ", ".join(sorted({report.nodeid for report in skipped})[:20])
        reporter.write_line(
            f"HARMONIA_NO_SKIPS=1: {len(skipped)} test(s) skipped, which CI forbids: {names}",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
