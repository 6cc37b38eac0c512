from __future__ import annotations

import pytest

import harmonia


@pytest.fixture(scope="session")
def enc() -> harmonia.HarmonyEncoding:
    return harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
