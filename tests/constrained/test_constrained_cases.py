"""Sanity checks of the shared constrained-decoding cases and sampler."""

from __future__ import annotations

import pytest
from constrained_cases import CASES, ENC, TurnSampler, check_turn

from harmonia import Role
from harmonia._tokenizer import special_tokens as st


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_compiles_and_renders(name: str) -> None:
    case = CASES[name]
    prompt = ENC.render_conversation_for_completion(case.conversation, Role.ASSISTANT)
    assert prompt[-2:] == [st.START, ENC.encode_ordinary("assistant")[0]]
    matcher = case.matcher()
    assert matcher.tokens == () and not matcher.is_finished


def test_sampler_follows_the_mask() -> None:
    sampler = TurnSampler(seed=1)
    matcher = CASES["functions"].matcher()
    tokens = sampler.sample(matcher)
    check_turn(CASES["functions"], tokens)
