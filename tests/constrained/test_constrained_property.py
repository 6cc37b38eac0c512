"""Property: every turn sampled under the mask is a valid turn.

1,040 turns (260 for each of the four conversations of ``test_constrained_cases``)
are sampled token by token from random logits under the mask. Each one must
parse with harmonia's strict parser, call only declared tools with arguments
that validate against their schemas (``jsonschema``), answer in the response
format when one is declared, and be accepted again, token by token, once parsed
and re-rendered by harmonia (renderer and grammar cannot drift apart).

``HARMONIA_CONSTRAINED_TURNS`` changes the number of turns per conversation.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from constrained_cases import CASES, ENC, Case, TurnSampler, check_turn, render_turn

from harmonia import Message
from harmonia._tokenizer import special_tokens as st

TURNS_PER_CASE = int(os.environ.get("HARMONIA_CONSTRAINED_TURNS", "260"))
SEEDS = {"functions": 11, "builtins": 12, "response_format": 13, "everything": 15}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sampled_turns_are_valid(name: str) -> None:
    case = CASES[name]
    base = case.matcher()
    sampler = TurnSampler(SEEDS[name])
    endings: Counter[str] = Counter()
    tokens_sampled = 0
    started = time.perf_counter()
    for _ in range(TURNS_PER_CASE):
        tokens = sampler.sample(base.copy())
        tokens_sampled += len(tokens)
        messages = check_turn(case, tokens)
        last = messages[-1]
        endings[last.recipient or "final"] += 1
        if _renders_within_options(case, messages):
            replay = base.copy()
            replay.consume_all(render_turn(messages))
            assert replay.is_finished
    elapsed = time.perf_counter() - started
    print(
        f"\n{name}: {TURNS_PER_CASE} turns, {tokens_sampled} tokens, {elapsed:.1f} s; "
        f"endings {dict(endings)}"
    )
    # Every way to end the turn was taken at least once (the seeds are fixed).
    assert set(endings) == {*case.tools, "final"}


def _renders_within_options(case: Case, messages: list[Message]) -> bool:
    """Whether harmonia's rendering of ``messages`` is one the case's options admit."""
    options = case.options
    # The channel-only placement refuses the renderer's recipient-in-role form.
    if messages[-1].recipient is not None and options.recipient_placement == "channel":
        return False
    # A token bound counts the model's tokens; the renderer's may be more.
    bound = options.analysis_max_tokens
    return bound is None or all(
        len(ENC.encode_ordinary(m.text)) <= bound for m in messages if m.channel == "analysis"
    )


def test_at_least_a_thousand_turns() -> None:
    assert TURNS_PER_CASE * len(CASES) >= 1000 or "HARMONIA_CONSTRAINED_TURNS" in os.environ


def test_sampled_turn_ends_with_a_turn_stop_token() -> None:
    case = CASES["functions"]
    tokens = TurnSampler(3).sample(case.matcher())
    assert tokens[-1] in (st.CALL, st.RETURN)
    assert st.END not in tokens[-1:]
