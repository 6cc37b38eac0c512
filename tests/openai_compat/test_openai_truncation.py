"""A completion cut off in the middle of a message must not look complete.

Without a stop token at the end, Chat answers ``finish_reason: "length"`` and
Responses ``status: "incomplete"`` (``max_output_tokens``), streaming and not,
with one ``truncated`` diagnostic; the caller can say otherwise. Every object is
validated with the ``openai`` package's types.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_helpers import encode, valid_chunk, valid_completion, valid_event, valid_response

from harmonia import HarmonyEncoding, InputError, OutputDiagnostic, RecoveryKind
from harmonia.openai_compat import (
    ChatCompletionStream,
    ResponseStream,
    chat_completion_from_tokens,
    response_from_tokens,
)

# The hardening issue's example: a tool call cut inside its arguments.
CUT_CALL = (
    "<|channel|>analysis<|message|>Weather in Tokyo.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "To'
)
WHOLE_CALL = CUT_CALL + 'kyo"}<|call|>'


def chat(enc: HarmonyEncoding, text: str, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
    found: list[OutputDiagnostic] = []
    data = chat_completion_from_tokens(
        enc, encode(enc, text), model="gpt-oss-20b", ids=1, created=0, diagnostics=found, **kwargs
    )
    valid_completion(data)
    return data["choices"][0], found


def chat_stream(enc: HarmonyEncoding, text: str, **finish: Any) -> list[dict[str, Any]]:
    stream = ChatCompletionStream(enc, model="gpt-oss-20b", ids=1, created=0)
    chunks = stream.feed_many(encode(enc, text)) + stream.finish(**finish)
    for chunk in chunks:
        valid_chunk(chunk)
    valid_completion(stream.completion)
    assert (
        stream.completion["choices"][0]["finish_reason"]
        == chunks[-1]["choices"][0]["finish_reason"]
    )
    return chunks


def response(enc: HarmonyEncoding, text: str, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
    found: list[OutputDiagnostic] = []
    data = response_from_tokens(
        enc,
        encode(enc, text),
        model="gpt-oss-20b",
        ids=1,
        created_at=0,
        diagnostics=found,
        **kwargs,
    )
    valid_response(data)
    return data, found


def response_events(enc: HarmonyEncoding, text: str, **finish: Any) -> list[dict[str, Any]]:
    stream = ResponseStream(enc, model="gpt-oss-20b", ids=1, created_at=0)
    events = stream.feed_many(encode(enc, text)) + stream.finish(**finish)
    for event in events:
        valid_event(event)
    assert events[-1]["response"] == stream.response
    return events


def truncations(found: list[OutputDiagnostic]) -> int:
    return sum(d.kind is RecoveryKind.TRUNCATED for d in found)


# -- Chat Completions ----------------------------------------------------------------------


def test_a_cut_tool_call_finishes_with_length(enc: HarmonyEncoding) -> None:
    choice, found = chat(enc, CUT_CALL)
    assert choice["finish_reason"] == "length"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "To'
    assert truncations(found) == 1
    whole, found = chat(enc, WHOLE_CALL)
    assert whole["finish_reason"] == "tool_calls" and found == []


def test_a_cut_answer_finishes_with_length(enc: HarmonyEncoding) -> None:
    choice, found = chat(enc, "<|channel|>final<|message|>The answer is")
    assert (choice["finish_reason"], choice["message"]["content"]) == ("length", "The answer is")
    assert truncations(found) == 1


def test_stopping_after_end_is_stop(enc: HarmonyEncoding) -> None:
    choice, found = chat(enc, "<|channel|>commentary<|message|>Checking the weather.<|end|>")
    assert choice["finish_reason"] == "stop" and found == []


def test_chat_streaming_finishes_with_length(enc: HarmonyEncoding) -> None:
    chunks = chat_stream(enc, CUT_CALL)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chat_stream(enc, WHOLE_CALL)[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_the_caller_says_the_engine_stopped_normally(enc: HarmonyEncoding) -> None:
    # An engine that leaves the stop token out of its tokens.
    choice, found = chat(enc, CUT_CALL + 'kyo"}', finished=True)
    assert choice["finish_reason"] == "tool_calls" and truncations(found) == 0
    chunks = chat_stream(enc, "<|channel|>final<|message|>Done", finished=True)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_the_caller_gives_the_finish_reason(enc: HarmonyEncoding) -> None:
    choice, _ = chat(enc, "<|channel|>final<|message|>I can", finish_reason="content_filter")
    assert choice["finish_reason"] == "content_filter"
    chunks = chat_stream(enc, "<|channel|>final<|message|>I can", finish_reason="content_filter")
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"
    with pytest.raises(InputError, match="finish_reason must be one of"):
        chat(enc, "<|channel|>final<|message|>x<|return|>", finish_reason="eos")
    stream = ChatCompletionStream(enc, model="m")
    with pytest.raises(InputError, match="finish_reason must be one of"):
        stream.finish(finish_reason="done")


# -- Responses -----------------------------------------------------------------------------


def test_a_cut_tool_call_makes_the_response_incomplete(enc: HarmonyEncoding) -> None:
    data, found = response(enc, CUT_CALL)
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in data["output"]] == ["completed", "incomplete"]
    assert truncations(found) == 1
    whole, found = response(enc, WHOLE_CALL)
    assert (whole["status"], whole["incomplete_details"], found) == ("completed", None, [])


def test_responses_streaming_ends_with_response_incomplete(enc: HarmonyEncoding) -> None:
    events = response_events(enc, CUT_CALL)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response_events(enc, WHOLE_CALL)[-1]["type"] == "response.completed"


def test_the_caller_overrides_the_response_status(enc: HarmonyEncoding) -> None:
    data, found = response(enc, "<|channel|>final<|message|>Done", finished=True)
    assert data["status"] == "completed" and truncations(found) == 0
    data, _ = response(
        enc, "<|channel|>final<|message|>Done<|return|>", incomplete_reason="content_filter"
    )
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "content_filter"}
    events = response_events(
        enc, "<|channel|>final<|message|>I", incomplete_reason="content_filter"
    )
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}
    with pytest.raises(InputError, match="incomplete_reason must be one of"):
        response(enc, "<|channel|>final<|message|>x<|return|>", incomplete_reason="length")
