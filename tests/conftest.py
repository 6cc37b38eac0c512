from __future__ import annotations

import pytest

import harmonia


@pytest.fixture(scope="session")
def enc() -> harmonia.HarmonyEncoding:
    return harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)


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
