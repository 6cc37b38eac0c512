"""overflow='trim-history': whole earliest exchanges go, system and developer stay."""

from __future__ import annotations

import json

import pytest

from harmonia import HarmonyEncoding, InputError, Message, Role
from harmonia.training import PRESETS, render_batch, render_for_training

Convs = list[tuple[list[Message], list[float | None] | None]]
HEAD = (Role.SYSTEM, Role.DEVELOPER)


def exchanges(messages: list[Message]) -> list[int]:
    """Indices of the user messages (each starts an exchange) after the first one."""
    users = [i for i, m in enumerate(messages) if m.author.role is Role.USER]
    return users[1:]


def test_trim_history_drops_the_fewest_earliest_exchanges(
    enc: HarmonyEncoding, random_conversations: Convs
) -> None:
    checked = 0
    for messages, _ in random_conversations:
        if len(exchanges(messages)) < 2:
            continue
        [whole] = render_for_training(messages, enc)
        limit = len(whole.input_ids) - 1
        policy = PRESETS["harmony"].with_(max_length=limit, overflow="trim-history")
        # Expected, from the definition: keep the head and everything from the k-th
        # exchange on, for the first k whose render fits.
        expected = None
        for start in exchanges(messages):
            keep = [i for i, m in enumerate(messages) if m.author.role in HEAD or i >= start]
            [candidate] = render_for_training([messages[i] for i in keep], enc)
            if len(candidate.input_ids) <= limit:
                expected = keep, candidate
                break
        if expected is None:
            continue
        keep, candidate = expected
        [sample] = render_for_training(messages, enc, policy)
        assert sample.truncated
        assert sample.input_ids == candidate.input_ids
        assert sample.loss_mask == candidate.loss_mask
        assert [sample.reasons[i] for i in keep] == list(candidate.reasons)
        gone = set(range(len(messages))) - set(keep)
        assert gone and all("trim-history" in sample.reasons[i] for i in gone)
        assert [s.message_index for s in sample.spans] == [
            keep[s.message_index] for s in candidate.spans if s.message_index is not None
        ]
        checked += 1
    assert checked >= 5


def test_trim_history_leaves_a_fitting_sample_alone(
    enc: HarmonyEncoding, random_conversations: Convs
) -> None:
    messages, _ = random_conversations[0]
    [whole] = render_for_training(messages, enc)
    policy = PRESETS["harmony"].with_(max_length=len(whole.input_ids), overflow="trim-history")
    assert render_for_training(messages, enc, policy) == [whole]


def test_trim_history_that_cannot_fit_is_a_problem_code(
    enc: HarmonyEncoding, random_conversations: Convs
) -> None:
    messages, _ = random_conversations[0]
    policy = PRESETS["harmony"].with_(max_length=3, overflow="trim-history")
    with pytest.raises(InputError, match="E141 trim_failed"):
        render_for_training(messages, enc, policy)


def test_a_batch_trims_history_and_rejects_what_cannot_fit() -> None:
    turns = [{"role": "system", "content": "Be brief."}]
    for k in range(3):
        turns += [
            {"role": "user", "content": f"Question {k}: " + "why " * 40},
            {"role": "assistant", "content": f"Answer {k}: " + "because " * 40},
        ]
    row = json.dumps({"messages": turns})
    whole = render_batch([row]).input_ids[0]
    trimmed = render_batch(
        [row], policy=PRESETS["harmony"].with_(max_length=len(whole) - 1, overflow="trim-history")
    )
    assert trimmed.stats.rows_ok == 1 and trimmed.stats.problems["W206"] == 1
    assert len(trimmed.input_ids[0]) < len(whole)
    refused = render_batch(
        [row], policy=PRESETS["harmony"].with_(max_length=20, overflow="trim-history")
    )
    assert [p.code for p in refused.problems] == ["E141"] and len(refused.rejected) == 1
