"""TRL's prompt-completion rows in ``harmonia data``: texts or messages, completion-only loss."""

from __future__ import annotations

import pytest

from harmonia import HarmonyEncoding
from harmonia.training import render_for_training
from harmonia.training._inputs import InputOptions, convert_row, detect_format
from harmonia.training._problems import RowError

CONVERSATIONAL = {
    "prompt": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "2+2?"},
    ],
    "completion": [{"role": "assistant", "content": "4"}],
}


def _trained(enc: HarmonyEncoding, row: dict[str, object]) -> str:
    converted = convert_row(row, InputOptions())
    [sample] = render_for_training(converted.conversation, enc, weights=converted.weights)
    return enc.decode_utf8(
        [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    )


def test_rows_are_detected_as_prompt_completion() -> None:
    assert detect_format({"prompt": "2+2?", "completion": "4"}) == "prompt-completion"
    assert detect_format(CONVERSATIONAL) == "prompt-completion"


def test_only_the_completion_trains(enc: HarmonyEncoding) -> None:
    assert _trained(enc, {"prompt": "2+2?", "completion": "4"}) == (
        "<|channel|>final<|message|>4<|return|>"
    )
    # The prompt's assistant message is context, as TRL's completion-only loss has it.
    assert _trained(enc, CONVERSATIONAL) == "<|channel|>final<|message|>4<|return|>"
    text = enc.decode_utf8(
        render_for_training(convert_row(CONVERSATIONAL, InputOptions()).conversation, enc)[
            0
        ].input_ids
    )
    assert "<|message|>Hello<|end|>" in text


def test_mixed_or_empty_rows_are_rejected() -> None:
    for row in ({"prompt": "x", "completion": []}, {"prompt": [], "completion": "y"}):
        with pytest.raises(RowError) as caught:
            convert_row(row, InputOptions())
        assert caught.value.code == "E102"
