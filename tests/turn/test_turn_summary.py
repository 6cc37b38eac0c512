"""How a turn ended: returned, called a tool, stopped after <|end|>, or was cut off."""

from __future__ import annotations

import pytest

from harmonia import (
    HarmonyEncoding,
    OutputAssembler,
    RecoveryKind,
    TurnEnd,
    TurnSummary,
)

CALL = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
THINK = "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant"


def summary_of(enc: HarmonyEncoding, text: str, finished: bool | None = None) -> TurnSummary:
    asm = OutputAssembler(enc)
    for token in enc.encode(text, allowed_special="all"):
        asm.feed(token)
    asm.finish(finished=finished)
    return asm.summary


def truncations(summary: TurnSummary) -> int:
    return sum(d.kind is RecoveryKind.TRUNCATED for d in summary.diagnostics)


def test_a_final_answer_returns(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, THINK + "<|channel|>final<|message|>4<|return|>")
    assert (s.end, s.truncated, s.calls) == (TurnEnd.RETURN, False, ())
    assert s.stop_token == enc.encode("<|return|>", allowed_special="all")[0]
    assert s.diagnostics == ()


def test_a_tool_call_calls(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, THINK + CALL + '{"city": "Paris"}<|call|>')
    assert s.end is TurnEnd.CALL and not s.truncated
    [call] = s.calls
    assert call.message is not None and call.message.recipient == "functions.get_weather"
    assert call.text == '{"city": "Paris"}'


def test_stopping_after_end_is_not_a_truncation(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, "<|channel|>commentary<|message|>Checking.<|end|>")
    assert s.end is TurnEnd.END and not s.truncated and truncations(s) == 0


@pytest.mark.parametrize(
    "text",
    [
        # The hardening issue's example: a tool call cut inside its arguments.
        CALL + '{"city": "To',
        THINK + "<|channel|>final<|message|>The answer is",
        # Cut inside a header, and right after a <|start|>.
        THINK + "<|channel|>comm",
        "<|channel|>analysis<|message|>hm<|end|><|start|>",
        # Nothing at all.
        "",
    ],
)
def test_output_without_a_stop_token_is_truncated_with_one_diagnostic(
    enc: HarmonyEncoding, text: str
) -> None:
    s = summary_of(enc, text)
    assert s.end is TurnEnd.TRUNCATED and s.truncated and s.stop_token is None
    assert truncations(s) == 1, s.diagnostics


def test_a_diagnostic_names_its_kind_and_position_once(enc: HarmonyEncoding) -> None:
    # What serve logs: "truncated at token 7: ...", not the kind and position twice.
    [diagnostic] = summary_of(enc, THINK + "<|channel|>final<|message|>The answer is").diagnostics
    text = str(diagnostic)
    assert text.startswith(f"truncated at token {diagnostic.token_index}: ")
    assert text.count("truncated at token") == 1, text


def test_the_cut_item_is_marked_and_keeps_its_text(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, CALL + '{"city": "To')
    [item] = s.items
    assert item.kind == "call" and item.truncated and item.text == '{"city": "To'
    assert item.stop_token is None
    # A truncated call is no call to dispatch blindly: the summary says so first.
    assert s.calls == (item,) and s.truncated


def test_the_caller_can_say_generation_stopped_normally(enc: HarmonyEncoding) -> None:
    # Engines often leave the stop token out of the tokens they return.
    s = summary_of(enc, CALL + "{}", finished=True)
    assert s.end is TurnEnd.CALL and not s.items[0].truncated and truncations(s) == 0
    s = summary_of(enc, "<|channel|>final<|message|>4", finished=True)
    assert s.end is TurnEnd.RETURN and truncations(s) == 0


def test_the_caller_can_say_generation_was_cut_off(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, "<|channel|>final<|message|>4<|return|>", finished=False)
    assert s.end is TurnEnd.TRUNCATED and truncations(s) == 1
    s = summary_of(enc, "<|channel|>final<|message|>The ans", finished=False)
    assert s.truncated and s.items[0].truncated and truncations(s) == 1


def test_trailing_junk_after_return_does_not_hide_the_return(enc: HarmonyEncoding) -> None:
    s = summary_of(enc, "<|channel|>final<|message|>Hi<|return|> trailing")
    assert s.end is TurnEnd.RETURN
    assert [d.kind for d in s.diagnostics] == [RecoveryKind.JUNK_BETWEEN_MESSAGES]


def test_usage(enc: HarmonyEncoding) -> None:
    text = THINK + "<|channel|>final<|message|>4<|return|>"
    s = summary_of(enc, text)
    assert s.output_tokens == len(enc.encode(text, allowed_special="all"))
    assert s.reasoning_tokens == s.items[0].tokens > 0
    assert str(TurnEnd.TRUNCATED) == "truncated"
