"""turns='expand': consecutive turns without reasoning share one sample when faithful."""

from __future__ import annotations

from harmonia import (
    Author,
    Conversation,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
)
from harmonia.training import PRESETS, render_for_training

KEEP = PRESETS["harmony"].with_(turns="expand", cot="keep_all")


def user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def said(channel: str, text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


def call_and_result() -> list[Message]:
    call = (
        said("commentary", '{"city": "Oslo"}')
        .with_recipient("functions.get_weather")
        .with_content_type("<|constrain|>json")
    )
    tool = Author.new(Role.TOOL, "functions.get_weather")
    result = (
        Message.from_author_and_content(tool, '{"temp": 3}')
        .with_channel("commentary")
        .with_recipient("assistant")
    )
    return [call, result]


def trained(sample_reasons: tuple[str, ...]) -> list[int]:
    return [i for i, r in enumerate(sample_reasons) if r == "trained"]


def turn_with_reasoning() -> list[Message]:
    """The first turn of both conversations below: it thinks, then answers."""
    return [user("a"), said("analysis", "think a"), said("final", "A")]


def test_consecutive_turns_without_reasoning_share_a_sample(enc: HarmonyEncoding) -> None:
    messages = [
        *turn_with_reasoning(),  # 0, 1, 2
        user("b"),  # 3
        said("final", "B"),  # 4: no reasoning
        user("c"),  # 5
        said("final", "C"),  # 6: no reasoning
        user("d"),  # 7
        said("analysis", "think d"),  # 8
        said("final", "D"),  # 9
    ]
    full, merged, last = render_for_training(messages, enc, KEEP)
    # cot="keep_all" shows turn 0's reasoning, which the model never saw after it:
    # turns 1 and 2 are trained elsewhere, in one sample, not two; turn 3 has
    # reasoning of its own and gets its own sample.
    assert trained(full.reasons) == [1, 2]
    assert trained(merged.reasons) == [4, 6]
    assert trained(last.reasons) == [8, 9]
    # That sample is the history as at inference (turn 0's reasoning gone) and
    # both turns in full: exactly what the model saw when writing either.
    expected = enc.render_with_spans(
        Conversation.from_messages(messages[:7]),
        RenderConversationConfig(auto_drop_analysis=False),
        drop=frozenset({1}),
    )
    assert merged.input_ids[:-1] == expected.ids[:-1]  # the last final ends <|return|>
    first = next(span for span in merged.spans if span.message_index == 4)
    assert merged.loss_mask[: first.start] == bytes(first.start)


def test_turns_are_not_merged_when_one_would_be_unfaithful(enc: HarmonyEncoding) -> None:
    messages = [
        *turn_with_reasoning(),  # 0, 1, 2
        user("b"),  # 3
        said("analysis", "think b"),  # 4
        *call_and_result(),  # 5, 6: turn 1 ends without a final
        user("c"),  # 7
        said("final", "C"),  # 8: no reasoning, sees turn 1's reasoning
        user("d"),  # 9
        said("final", "D"),  # 10: no reasoning, turn 1's reasoning is gone by now
        user("e"),  # 11
        said("final", "E"),  # 12
    ]
    samples = render_for_training(messages, enc, KEEP)
    # Turn 1 has reasoning; turn 2 cannot carry turn 3, which must not see the
    # reasoning of turn 1 that turn 2 saw; turns 3 and 4 then share one.
    assert [trained(s.reasons) for s in samples[1:]] == [[4, 5], [8], [10, 12]]
    # Every message trained somewhere, each exactly once.
    everywhere = sorted(i for s in samples for i in trained(s.reasons))
    assert everywhere == [1, 2, 4, 5, 8, 10, 12]


def test_guide_merges_turns_that_ended_without_a_final(enc: HarmonyEncoding) -> None:
    policy = PRESETS["harmony"].with_(turns="expand")
    messages = [
        user("a"),  # 0
        said("analysis", "think a"),  # 1
        *call_and_result(),  # 2, 3: no final
        user("b"),  # 4
        said("commentary", "Checking."),  # 5
        *call_and_result(),  # 6, 7: no reasoning, no final
        user("c"),  # 8
        said("final", "C"),  # 9: no reasoning
        user("d"),  # 10
        said("analysis", "think d"),  # 11
        said("final", "D"),  # 12
    ]
    full, *rest = render_for_training(messages, enc, policy)
    assert 1 not in full.reasons or full.reasons[1] != "trained"
    assert [trained(s.reasons) for s in rest] == [[1, 2], [5, 6, 9]]
