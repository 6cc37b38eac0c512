"""Properties of every sample, on random well-formed conversations under every preset."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harmonia import (
    Conversation,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
)
from harmonia.training import IGNORE_INDEX, PRESETS, TrainPolicy, TrainSample, render_for_training

Convs = list[tuple[list[Message], list[float | None] | None]]
POLICIES = {**PRESETS, "expand": PRESETS["harmony"].with_(turns="expand")}


def special(enc: HarmonyEncoding, text: str) -> int:
    [token] = enc.encode(text, allowed_special="all")
    return token


def owner(sample: TrainSample, position: int) -> tuple[int, str]:
    """(message index, part) of the token at ``position``, from the spans."""
    for span in sample.spans:
        if span.start <= position < span.stop:
            for part, begin, end in span.parts():  # type: ignore[attr-defined]
                if begin <= position < end:
                    return span.message_index, part  # type: ignore[return-value]
    raise AssertionError(f"no span owns position {position}")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_sample_properties(enc: HarmonyEncoding, random_conversations: Convs, name: str) -> None:
    policy: TrainPolicy = POLICIES[name]
    stops = {special(enc, "<|return|>"), special(enc, "<|call|>")}
    end = special(enc, "<|end|>")
    for messages, weights in random_conversations:
        samples = render_for_training(messages, enc, policy, weights=weights)
        for sample in samples:
            ids, mask = sample.input_ids, sample.loss_mask
            assert len(ids) == len(mask)
            labels = sample.labels()
            assert labels == [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
            trained = [p for p, m in enumerate(mask) if m]
            if policy.full_sequence:
                assert len(trained) == len(ids)
                continue
            for p in trained:
                i, part = owner(sample, p)
                assert messages[i].author.role is Role.ASSISTANT, (name, i, part)
                assert sample.reasons[i] == "trained"
                if part in ("start", "role") and not policy.turn_start:
                    # Only the <|start|>assistant the model writes after its own <|end|>.
                    previous = max(s.stop for s in sample.spans if s.stop <= p)
                    assert ids[previous - 1] == end
            if trained and policy.terminators and weights is None and ends_properly(messages):
                assert ids[trained[-1]] in stops
            # Parsing the ids gives back the rendered messages.
            parsed = enc.parse_messages_from_completion_tokens(ids, None, strict=True)
            rendered = [messages[s.message_index] for s in sample.spans]  # type: ignore[index]
            assert [key(m) for m in parsed] == [key(m) for m in rendered]
            if policy.turns in ("faithful", "expand"):
                check_faithful(messages, sample)
            if sample.sample_index > 0:
                check_expanded_context(enc, messages, sample)


def ends_properly(messages: list[Message]) -> bool:
    """The conversation's last assistant message is a final answer or a tool call."""
    last = [m for m in messages if m.author.role is Role.ASSISTANT][-1:]
    return bool(last) and (last[0].channel == "final" or last[0].recipient is not None)


def key(m: Message) -> tuple[object, ...]:
    """What a parse gives back (system and developer contents come back as text)."""
    header = (m.author.role, m.author.name, m.recipient, m.channel, m.content_type)
    if m.author.role in (Role.SYSTEM, Role.DEVELOPER):
        return header
    return (*header, "".join(getattr(c, "text", "") for c in m.content))


def check_faithful(messages: list[Message], sample: TrainSample) -> None:
    """No trained final answer misses reasoning of its own turn."""
    present = {s.message_index for s in sample.spans}
    for i, reason in enumerate(sample.reasons):
        if reason != "trained" or messages[i].channel != "final":
            continue
        k = i - 1
        while k >= 0 and messages[k].author.role in (Role.ASSISTANT, Role.TOOL):
            if messages[k].channel == "analysis":
                assert k in present, f"final {i} is trained without its reasoning {k}"
            k -= 1


def check_expanded_context(
    enc: HarmonyEncoding, messages: list[Message], sample: TrainSample
) -> None:
    """An expanded sample's context is the completion render of the turn's history."""
    first = sample.loss_mask.index(1)
    turn_start = next(s for s in sample.spans if s.start <= first < s.stop).message_index
    assert turn_start is not None
    while messages[turn_start - 1].author.role in (Role.ASSISTANT, Role.TOOL):
        turn_start -= 1
    history = Conversation.from_messages(messages[:turn_start])
    prompt = enc.render_conversation_for_completion(
        history, Role.ASSISTANT, RenderConversationConfig(cot_policy="guide")
    )
    assert sample.input_ids[: len(prompt)] == prompt
    assert not any(sample.loss_mask[: len(prompt)])


def test_expand_recovers_every_turn(enc: HarmonyEncoding, random_conversations: Convs) -> None:
    """Under expand every assistant message of a final-ending turn is trained somewhere."""
    policy = POLICIES["expand"]
    for messages, _ in random_conversations:
        samples = render_for_training(messages, enc, policy)
        trained = {i for s in samples for i, r in enumerate(s.reasons) if r == "trained"}
        finals = {i for i, m in enumerate(messages) if m.channel == "final"}
        assert finals <= trained


def test_max_length_drop_and_truncate(enc: HarmonyEncoding, random_conversations: Convs) -> None:
    messages, _ = max(random_conversations, key=lambda c: len(c[0]))
    [whole] = render_for_training(messages, enc)
    limit = len(whole.input_ids) - 5
    assert render_for_training(messages, enc, PRESETS["harmony"].with_(max_length=limit)) == []
    [cut] = render_for_training(
        messages, enc, PRESETS["harmony"].with_(max_length=limit, overflow="truncate")
    )
    assert cut.truncated and cut.input_ids == whole.input_ids[:limit]
    assert cut.loss_mask == whole.loss_mask[:limit]


def test_reference_rule_and_all_turns_match_the_reference(
    enc: HarmonyEncoding, corpus_path: Path
) -> None:
    """input_ids equal openai-harmony 0.0.8's render_conversation_for_training."""
    if not corpus_path.exists():
        pytest.skip(f"the shared reference corpus is not on this machine ({corpus_path})")
    policy = TrainPolicy(cot="reference", turns="all")
    checked = 0
    with gzip.open(corpus_path, "rt", encoding="utf-8") as lines:
        for line in lines:
            case = json.loads(line)
            if case["kind"] != "render" or case["expected"]["training"] == "error":
                continue
            conversation = Conversation.from_json(json.dumps(case["conversation"]))
            [sample] = render_for_training(conversation, enc, policy)
            assert sample.input_ids == case["expected"]["training"], case["id"]
            checked += 1
    assert checked > 800
