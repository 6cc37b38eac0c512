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
