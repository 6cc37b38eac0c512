"""The fast mask pass and rules against their straightforward definitions.

``mask_from_spans`` decides in one pass over the spans and joins the mask from
runs; ``faithful`` keeps running counts; the drop rules scan with early exits.
Here each is computed the slow, obvious way (part by part from
``MessageSpan.parts()``, sets of indices) on random conversations under every
preset and a few policies that switch single fields, and the results must agree
bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from harmonia import HarmonyEncoding, Message, Role
from harmonia._render.cot import dropped_indices
from harmonia.training import PRESETS, TrainPolicy, TrainSample, render_for_training
from harmonia.training._faithful import faithful, turn_ids

Convs = list[tuple[list[Message], list[float | None] | None]]
HEADER_PARTS = {"recipient", "channel", "content_type", "message"}
POLICIES = {
    **PRESETS,
    "expand": PRESETS["harmony"].with_(turns="expand"),
    "reference-all": TrainPolicy(cot="reference", turns="all"),
    "no-headers-turn-start": TrainPolicy(headers=False, turn_start=True, cot="keep_all"),
    "no-terminators": TrainPolicy(terminators=False, turns="all"),
    "no-calls": TrainPolicy(tool_calls=False, turns="last"),
    "final-end-weights-off": TrainPolicy(final_end="end", weights=False, channels=("final",)),
}


def special(enc: HarmonyEncoding, text: str) -> int:
    [token] = enc.encode(text, allowed_special="all")
    return token


def expected_mask(
    sample: TrainSample, messages: Sequence[Message], policy: TrainPolicy, end: int
) -> bytes:
    """Set every part that the policy trains of every message the sample trains."""
    ids = sample.input_ids
    mask = bytearray(len(ids))
    # An expanded sample renders the history up to its turn (its last message).
    last = len(messages) - 1 if sample.sample_index == 0 else sample.spans[-1].message_index
    previous = None
    for span in sample.spans:
        i = span.message_index
        assert i is not None
        message = messages[i]
        if sample.reasons[i] == "trained":
            wanted = {"body"}
            if policy.headers:
                wanted |= HEADER_PARTS
            # <|start|>assistant: written by the model after its own <|end|>.
            own = (
                previous is not None
                and messages[previous.message_index].author.role is Role.ASSISTANT  # type: ignore[index]
                and ids[previous.end] == end
            )
            if policy.inner_start if own else policy.turn_start:
                wanted |= {"start", "role"}
            if policy.terminators and (
                policy.end_after_final or i == last or message.channel != "final"
            ):
                wanted.add("terminator")
            for part, begin, stop in span.parts():  # type: ignore[attr-defined]
                if part in wanted:
                    mask[begin:stop] = b"\x01" * (stop - begin)
        previous = span
    return bytes(mask)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_mask_equals_the_part_by_part_mask(
    enc: HarmonyEncoding, random_conversations: Convs, name: str
) -> None:
    policy = POLICIES[name]
    end = special(enc, "<|end|>")
    trained = 0
    for messages, weights in random_conversations:
        for sample in render_for_training(messages, enc, policy, weights=weights):
            if policy.full_sequence:
                assert sample.loss_mask == b"\x01" * len(sample.input_ids)
                continue
            assert sample.loss_mask == expected_mask(sample, messages, policy, end)
            trained += sample.n_trained
    assert trained or policy.full_sequence  # the policy trains something somewhere


def slow_faithful(
    messages: Sequence[Message], dropped: frozenset[int], turns: Sequence[int]
) -> list[bool]:
    """The definition: what is dropped before a turn is exactly the analysis before
    the last final answer preceding it, and nothing of the turn is dropped before
    the message."""
    out = []
    for i, t in enumerate(turns):
        if t < 0:
            out.append(True)
            continue
        start = turns.index(t)
        finals = [
            j
            for j in range(start)
            if messages[j].author.role is Role.ASSISTANT and messages[j].channel == "final"
        ]
        last_final = finals[-1] if finals else 0
        expected = {k for k in range(last_final) if messages[k].channel == "analysis"}
        before = {k for k in dropped if k < start}
        own = any(k in dropped for k in range(start, i))
        out.append(before == expected and not own)
    return out


def slow_reference_drops(messages: Sequence[Message]) -> frozenset[int]:
    """openai-harmony 0.0.8: with a final as the last assistant message, the
    analysis before the first final (of any role) is left out."""
    assistant = [m for m in messages if m.author.role is Role.ASSISTANT]
    if not assistant or assistant[-1].channel != "final":
        return frozenset()
    finals = [i for i, m in enumerate(messages) if m.channel == "final"]
    return frozenset(i for i in range(finals[0]) if messages[i].channel == "analysis")


def slow_guide_drops(messages: Sequence[Message], turns: Sequence[int]) -> frozenset[int]:
    """The analysis before the last final answer that precedes the last turn."""
    if max(turns, default=-1) < 0:
        start = len(messages)
    else:
        start = min(i for i, t in enumerate(turns) if t == max(turns))
    finals = [
        j
        for j in range(start)
        if messages[j].author.role is Role.ASSISTANT and messages[j].channel == "final"
    ]
    if not finals:
        return frozenset()
    return frozenset(k for k in range(finals[-1]) if messages[k].channel == "analysis")


def test_rules_equal_their_definitions(random_conversations: Convs) -> None:
    for messages, _ in random_conversations:
        turns = turn_ids(messages)
        # Prefixes too: an expanded sample renders the history up to a turn.
        for n in range(1, len(messages) + 1):
            head, head_turns = messages[:n], turns[:n]
            reference = dropped_indices(head, "reference", training=True)
            guide = dropped_indices(head, "guide", training=True)
            assert reference == slow_reference_drops(head)
            assert guide == slow_guide_drops(head, head_turns)
            for dropped in (reference, guide, frozenset()):
                assert faithful(head, dropped, head_turns) == slow_faithful(
                    head, dropped, head_turns
                )
