"""Optional differential checks: our JSON is the reference's JSON, both ways.

Skipped unless ``openai_harmony`` is installed (``pip install -e '.[bench]'``);
``test_model.py`` pins the same shapes without it.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

import harmonia

ref: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
pytestmark = pytest.mark.differential

sys.path.insert(0, str(Path(__file__).parent.parent.parent / "tools"))
from fuzz_render import conversation  # noqa: E402


@pytest.mark.parametrize("seed", range(300))
def test_json_is_interchangeable(seed: int) -> None:
    ours = conversation(seed, harmonia)
    theirs = conversation(seed, ref)
    text = ours.to_json()
    assert text == theirs.to_json()
    # Reading back agrees too, quirks included: a None that to_json omitted
    # comes back as the field's default in both libraries.
    assert (
        harmonia.Conversation.from_json(text).to_json()
        == ref.Conversation.from_json(text).to_json()
    )


@pytest.mark.parametrize("seed", range(0, 3000, 10))
def test_renders_are_identical(ref_enc: Any, enc: harmonia.HarmonyEncoding, seed: int) -> None:
    ours = conversation(seed, harmonia)
    theirs = conversation(seed, ref)
    for role in (harmonia.Role.ASSISTANT, harmonia.Role.USER):
        try:
            want: Any = ref_enc.render_conversation_for_completion(theirs, ref.Role(role.value))
        except Exception:
            want = "error"
        try:
            got: Any = enc.render_conversation_for_completion(ours, role)
        except harmonia.RenderError:
            # Refused on purpose where the reference renders (README: unreadable
            # header fields, undeclarable tool names, invalid schemas).
            got = "error" if want == "error" else "refused"
        except harmonia.HarmonyError:
            got = "error"
        if got != "refused":
            assert got == want


def test_random_message_dicts_round_trip() -> None:
    rng = random.Random(3)
    for _ in range(200):
        raw = {
            "role": rng.choice(["user", "assistant", "tool"]),
            "name": rng.choice([None, "x"]),
            "content": rng.choice(["plain", [{"type": "text", "text": "t"}]]),
        }
        for key in ("channel", "recipient", "content_type"):
            if rng.random() < 0.5:
                raw[key] = rng.choice(["a", "", "<|constrain|>json"])
        ours = harmonia.Message.from_dict(raw).to_dict()
        theirs = ref.Message.from_dict(raw).to_dict()
        assert json.dumps(ours) == json.dumps(theirs)
