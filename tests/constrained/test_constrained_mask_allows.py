"""Property: ``allows(token)`` and the mask's bit agree on every token, at every step.

Turns are sampled under the mask (``TurnSampler``) for the cases with function
tools, with ``tool_choice`` left as declared and with ``"required"``. At each step
inside JSON content (the only place the key rule acts) every token holding a quote
or a backslash is compared, and at every other step a random draw of tokens plus
the token sampled. ``HARMONIA_MASK_ALLOWS_TURNS`` changes the number of turns.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from constrained_cases import _BIAS_RANGES, CASES, ENC, TurnSampler

from harmonia._tokenizer import special_tokens as st
from harmonia.constrained import TurnMatcher, mask_to_bool

TURNS = int(os.environ.get("HARMONIA_MASK_ALLOWS_TURNS", "25"))
QUOTE_OR_BACKSLASH = np.array(
    [
        t
        for t, data in enumerate(ENC.tokenizer.token_bytes_table[: st.FIRST_SPECIAL])
        if b'"' in data or b"\\" in data
    ]
)
KNOWN = 77523  # ' \""': closes a string value after an escaped quote


def _disagreements(matcher: TurnMatcher, tokens: np.ndarray) -> list[int]:
    allowed = mask_to_bool(matcher.fill_mask())
    return [int(t) for t in tokens if matcher.allows(int(t)) != bool(allowed[t])]


def _in_json(matcher: TurnMatcher) -> bool:
    keys = matcher._keys
    return keys is not None and keys.in_json and keys._mode == 1


@pytest.mark.parametrize("choice", [None, "required"])
@pytest.mark.parametrize("name", ["functions", "everything"])
def test_allows_agrees_with_the_mask(name: str, choice: str | None) -> None:
    case = CASES[name]
    options = case.options if choice is None else dataclasses.replace(
        case.options, tool_choice=choice
    )  # fmt: skip
    base = TurnMatcher.from_conversation(case.conversation, options)
    sampler = TurnSampler(31 + len(name) + (choice is None))
    rng = np.random.default_rng(7)
    checked = json_steps = 0
    known_in_values = 0  # steps inside a string value, where KNOWN is harmless
    mask = np.zeros_like(base.fill_mask())
    for _ in range(TURNS):
        matcher = base.copy()
        while not matcher.is_finished:
            if _in_json(matcher):
                json_steps += 1
                probe = QUOTE_OR_BACKSLASH
                keys = matcher._keys
                known_in_values += bool(keys and keys._in_string and not keys._in_key)
            else:
                probe = rng.integers(0, 200_000, 48)
            bad = _disagreements(matcher, probe)
            assert bad == [], (ENC.decode(list(matcher.tokens[-30:])), bad[:5])
            checked += len(probe)
            matcher.fill_mask(mask)
            bias = {k: rng.uniform(lo, hi) for k, (lo, hi) in _BIAS_RANGES.items()}
            token = sampler.pick(mask, bias)
            assert matcher.allows(token)
            matcher.consume(token)
    assert json_steps > 0 and checked > 0 and known_in_values > 0
