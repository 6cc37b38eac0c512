"""Responses API streaming: the event sequence, its indices, and reassembly."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_helpers import (
    COMPLETION_MESSAGES,
    TOKEN_SOUP_VOCAB,
    completion_tokens,
    encode,
    valid_event,
    valid_response,
)

from harmonia import HarmonyEncoding, load_harmony_encoding
from harmonia.openai_compat import BuiltinCalls, ResponseStream, response_from_tokens

ENC = load_harmony_encoding("HarmonyGptOss")

_DELTAS = {
    "response.reasoning_text.delta",
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.code_interpreter_call_code.delta",
}


def events_of(
    enc: HarmonyEncoding,
    tokens: list[int],
    *,
    finished: bool | None = None,
    builtin_calls: BuiltinCalls = "function_call",
    request: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Stream the tokens, check every event and the invariants, return the events."""
    stream = ResponseStream(
        enc,
        model="gpt-oss-20b",
        ids="seed",
        created_at=5,
        builtin_calls=builtin_calls,
        request=request,
    )
    events = [e for t in tokens for e in stream.feed(t)] + stream.finish(finished=finished)
    for event in events:
        valid_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert sum(e["type"].startswith("response.") and "response" in e for e in events) == 3
    whole = response_from_tokens(
        enc,
        tokens,
        model="gpt-oss-20b",
        ids="seed",
        created_at=5,
        finished=finished,
        builtin_calls=builtin_calls,
        request=request,
    )
    valid_response(whole)
    assert events[-1]["response"] == whole == stream.response
    assert events[-1]["type"] == f"response.{whole['status']}"
    check_reassembly(events, whole["output"])
    return events


def check_reassembly(events: list[dict[str, Any]], output: list[dict[str, Any]]) -> None:
    """Per output item: added, deltas joining to the done text, done with the final item."""
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == list(range(len(output)))
    assert [e["output_index"] for e in done] == list(range(len(output)))
    assert [e["item"] for e in done] == output
    for index, item in enumerate(output):
        assert added[index]["item"]["id"] == item["id"]
        assert added[index]["item"]["status"] == "in_progress"
        mine = [e for e in events if e.get("output_index") == index]
        assert mine[0]["type"] == "response.output_item.added"
        assert mine[-1]["type"] == "response.output_item.done"
        assert all(e.get("item_id", item["id"]) == item["id"] for e in mine)
        joined = "".join(e["delta"] for e in mine if e["type"] in _DELTAS)
        if item["type"] == "reasoning" or item["type"] == "message":
            assert joined == item["content"][0]["text"]
        elif item["type"] == "function_call":
            assert joined == item["arguments"]
        elif item["type"] == "code_interpreter_call":
            assert joined == item["code"]
    # Items do not interleave: each one is done before the next is added.
    order = [(e["type"], e["output_index"]) for e in events if "output_index" in e]
    indices = [i for _, i in order]
    assert indices == sorted(indices)


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events[2:-1]]


def test_reasoning_and_message_sequence(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>analysis<|message|>Hm.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hi!<|return|>",
    )
    events = events_of(enc, tokens)
    assert types(events) == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    text_done = next(e for e in events if e["type"] == "response.output_text.done")
    assert (text_done["text"], text_done["output_index"], text_done["content_index"]) == (
        "Hi!",
        1,
        0,
    )


def test_function_call_sequence(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Tokyo"}<|call|>',
    )
    events = events_of(enc, tokens)
    seq = types(events)
    assert seq[0] == "response.output_item.added"
    assert set(seq[1:-2]) == {"response.function_call_arguments.delta"}
    assert seq[-2:] == ["response.function_call_arguments.done", "response.output_item.done"]
    item = events[2]["item"]
    assert (item["name"], item["arguments"], item["call_id"][:5]) == ("get_weather", "", "call_")
    assert events[-3]["arguments"] == '{"city":"Tokyo"}'


def test_native_builtin_sequences(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        '<|channel|>analysis to=browser.search code<|message|>{"query":"x"}<|call|>'
        "<|start|>assistant<|channel|>analysis to=python code<|message|>print(1)<|call|>",
    )
    events = events_of(enc, tokens, builtin_calls="native")
    seq = [t for t in types(events) if t != "response.code_interpreter_call_code.delta"]
    assert seq == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    assert events[-1]["response"]["output"][0]["action"] == {"type": "search", "query": "x"}


def test_incomplete(enc: HarmonyEncoding) -> None:
    events = events_of(enc, encode(enc, "<|channel|>final<|message|>Once upon"), finished=False)
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-2]["item"]["status"] == "incomplete"


def test_created_snapshot_echoes_the_request(enc: HarmonyEncoding) -> None:
    request = {"input": "Hi", "instructions": "Be brief.", "tools": [], "tool_choice": "auto"}
    events = events_of(enc, encode(enc, "<|channel|>final<|message|>Hi"), request=request)
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert created["instructions"] == "Be brief."
    assert created["id"] == events[-1]["response"]["id"]


def test_empty_output(enc: HarmonyEncoding) -> None:
    events = events_of(enc, [])
    assert types(events) == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=COMPLETION_MESSAGES,
    last_stop=st.booleans(),
    finished=st.sampled_from([None, True, False]),
    native=st.booleans(),
)
def test_streaming_reassembles_to_the_non_streaming_response(
    messages: list[tuple[str, str, list[int]]],
    last_stop: bool,
    finished: bool | None,
    native: bool,
) -> None:
    tokens = completion_tokens(messages, last_stop)
    mode: BuiltinCalls = "native" if native else "function_call"
    events = events_of(ENC, tokens, finished=finished, builtin_calls=mode)
    assert len(events[-1]["response"]["output"]) == len(messages)
    # Cut off: said so by the caller, or (when it says nothing) no stop token at the end.
    cut = finished is False or (finished is None and not (last_stop and messages))
    assert (events[-1]["type"] == "response.incomplete") == cut


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(TOKEN_SOUP_VOCAB), max_size=40), st.sampled_from([None, True, False])
)
def test_any_token_soup_gives_valid_events(tokens: list[int], finished: bool | None) -> None:
    events = events_of(ENC, tokens, finished=finished)
    for item in events[-1]["response"]["output"]:
        if item["type"] == "message":
            assert "<|" not in item["content"][0]["text"]
        if item["type"] == "function_call":
            assert "<|" not in item["arguments"] + item["name"]


def _encoder_bytes(event: dict[str, Any]) -> bytes:
    import json

    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("logprobs", [False, True])
def test_encode_event_is_the_json_encoders_bytes(logprobs: bool) -> None:
    # Text deltas come from a template (harmonia serve encodes one per token); every
    # event, templated or not, must be the encoder's bytes exactly.
    from harmonia.engines import TokenLogprob
    from harmonia.openai_compat._responses_stream import encode_event

    text = (
        '<|channel|>analysis<|message|>Quote " back\\slash\ttab é 漢字 🙂\u2028<|end|>'
        '<|start|>assistant<|channel|>final<|message|>Hi "there"\n\x01<|return|>'
    )
    tokens = ENC.encode(text, allowed_special="all")
    stream = ResponseStream(ENC, model="m", ids="seed", created_at=0)
    events: list[dict[str, Any]] = []
    for token in tokens:
        score = TokenLogprob(token, -0.5) if logprobs else None
        events += stream.feed(token, score)
    events += stream.finish()
    kinds = {event["type"] for event in events}
    assert {"response.output_text.delta", "response.reasoning_text.delta"} <= kinds
    for event in events:
        assert encode_event(event) == _encoder_bytes(event)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), item_id=st.text(max_size=12), seq=st.integers(0, 2**40))
def test_a_text_delta_of_any_text_encodes_as_the_encoder_does(
    text: str, item_id: str, seq: int
) -> None:
    from harmonia.openai_compat._responses_stream import encode_event

    for kind, extra in (
        ("response.output_text.delta", {"logprobs": []}),
        ("response.reasoning_text.delta", {}),
        ("response.output_text.delta", {"logprobs": [{"token": "x"}]}),  # not templated
        ("response.output_text.delta", {"other": []}),  # another key: not templated
        ("response.reasoning_text.delta", {"logprobs": []}),  # one key more: not templated
    ):
        event = {
            "type": kind,
            "sequence_number": seq,
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": text,
            **extra,
        }
        try:
            expected = _encoder_bytes(event)
        except UnicodeEncodeError:  # a lone surrogate: neither path can write it
            with pytest.raises(UnicodeEncodeError):
                encode_event(event)
            continue
        assert encode_event(event) == expected


def test_an_event_in_another_shape_is_encoded_whole() -> None:
    from harmonia.openai_compat._responses_stream import encode_event

    event = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",  # keys in another order than the template's
        "sequence_number": 3,
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
        "logprobs": [],
    }
    assert encode_event(event) == _encoder_bytes(event)
    assert encode_event({**event, "sequence_number": True}) == _encoder_bytes(
        {**event, "sequence_number": True}
    )
