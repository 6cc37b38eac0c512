"""The OpenAI-compat test helpers themselves, and the id generator."""

from __future__ import annotations

import pytest
from openai_helpers import encode, valid_completion

import harmonia
from harmonia import HarmonyEncoding
from harmonia.openai_compat import IdGenerator, seed_from_tokens


def test_helpers_reject_unknown_fields() -> None:
    data = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "contnet": "typo"},
            }
        ],
    }
    with pytest.raises(AssertionError, match="contnet"):
        valid_completion(data)


def test_ids_are_deterministic_with_a_seed_and_unique() -> None:
    a, b = IdGenerator("s"), IdGenerator("s")
    ids = [a.new("call") for _ in range(50)]
    assert ids == [b.new("call") for _ in range(50)]
    assert len(set(ids)) == 50
    assert IdGenerator("t").new("call") != ids[0]
    # Each prefix counts on its own, so the order of requests does not matter.
    c = IdGenerator("s")
    c.new("msg")
    assert c.new("call") == ids[0]


def test_ids_without_seed_are_random() -> None:
    assert IdGenerator().new("call") != IdGenerator().new("call")
    assert not IdGenerator().deterministic


def test_seed_from_tokens_follows_the_prompt(enc: HarmonyEncoding) -> None:
    one, two = encode(enc, "turn one"), encode(enc, "turn one, turn two")
    assert seed_from_tokens(one) == seed_from_tokens(list(one))
    assert seed_from_tokens(one) != seed_from_tokens(two)


def test_the_encoding_fixture_is_harmony(enc: HarmonyEncoding) -> None:
    assert isinstance(enc, harmonia.HarmonyEncoding)
