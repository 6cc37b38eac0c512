"""Chat Completions streaming: chunks validate, and reassemble to the non-streaming result."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_helpers import (
    COMPLETION_MESSAGES,
    TOKEN_SOUP_VOCAB,
    completion_tokens,
    encode,
    reassemble_chat,
    valid_chunk,
    valid_completion,
)

from harmonia import HarmonyEncoding, InputError, load_harmony_encoding
from harmonia.engines import TokenLogprob
from harmonia.openai_compat import ChatCompletionStream, chat_completion_from_tokens

ENC = load_harmony_encoding("HarmonyGptOss")
#: What a caller may say about why generation stopped (None: read it from the tokens).
FINISHED = st.sampled_from([None, True, False])


def stream_of(
    enc: HarmonyEncoding, tokens: list[int], finished: bool | None = None, **kwargs: Any
) -> tuple[list[dict[str, Any]], ChatCompletionStream]:
    stream = ChatCompletionStream(enc, model="gpt-oss-20b", ids="seed", created=7, **kwargs)
    chunks = [c for t in tokens for c in stream.feed(t)]
    chunks += stream.finish(finished=finished)
    for chunk in chunks:
        valid_chunk(chunk)
    return chunks, stream


def check_matches_non_streaming(
    enc: HarmonyEncoding, tokens: list[int], finished: bool | None = None
) -> list[dict[str, Any]]:
    chunks, stream = stream_of(enc, tokens, finished)
    whole = chat_completion_from_tokens(
        enc, tokens, model="gpt-oss-20b", ids="seed", created=7, finished=finished
    )
    valid_completion(whole)
    choice = whole["choices"][0]
    assert reassemble_chat(chunks) == {
        "message": choice["message"],
        "finish_reason": choice["finish_reason"],
    }
    assert stream.completion == whole
    assert {c["id"] for c in chunks} == {whole["id"]}
    return chunks


def deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


def test_reasoning_then_content(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>analysis<|message|>Think.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer!<|return|>",
    )
    chunks = check_matches_non_streaming(enc, tokens)
    got = deltas(chunks)
    assert got[0] == {"role": "assistant", "content": ""}
    assert {"reasoning_content": "Think"} in got
    assert {"content": "Answer"} in got
    assert got[-1] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_tool_call_deltas(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>commentary<|message|>On it.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Tokyo"}<|call|>'
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
        "<|message|>{}<|call|>",
    )
    chunks = check_matches_non_streaming(enc, tokens)
    calls = [d["tool_calls"][0] for d in deltas(chunks) if "tool_calls" in d]
    first = calls[0]
    assert first["index"] == 0 and first["type"] == "function"
    assert first["id"].startswith("call_")
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    pieces = [c["function"]["arguments"] for c in calls if c["index"] == 0 and "id" not in c]
    assert "".join(pieces) == '{"city":"Tokyo"}' and len(pieces) > 1
    assert all("id" not in c and "name" not in c["function"] for c in calls[1:] if c["index"] == 0)
    second = next(c for c in calls if c["index"] == 1)
    assert second["function"]["name"] == "get_time" and second["id"] != first["id"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert {"content": "On"} in deltas(chunks)


def test_two_texts_are_separated_like_the_non_streaming_content(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>commentary<|message|>First.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|><|end|>"
        "<|start|>assistant<|channel|>final<|message|>Second.<|return|>",
    )
    chunks = check_matches_non_streaming(enc, tokens)
    assert reassemble_chat(chunks)["message"]["content"] == "First.\n\nSecond."


def test_length_and_usage(enc: HarmonyEncoding) -> None:
    tokens = encode(enc, "<|channel|>analysis<|message|>Let me think about")
    chunks = check_matches_non_streaming(enc, tokens, finished=False)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    chunks, stream = stream_of(enc, tokens, finished=False, include_usage=True, prompt_tokens=5)
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == len(tokens)
    assert last["usage"]["prompt_tokens"] == 5
    assert stream.completion["usage"] == last["usage"]


def test_nothing_after_finish(enc: HarmonyEncoding) -> None:
    chunks, stream = stream_of(enc, [])
    assert [d for d in deltas(chunks)] == [{"role": "assistant", "content": ""}, {}]
    assert stream.finish() == []
    with pytest.raises(InputError, match="after finish"):
        stream.feed(1)


def test_no_markup_reaches_content(enc: HarmonyEncoding) -> None:
    tokens = encode(
        enc,
        "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>"
        "A<|reserved_200020|>B<|message|>C<|return|>",
    )
    chunks, stream = stream_of(enc, tokens)
    text = "".join(d.get("content") or "" for d in deltas(chunks))
    assert text == "ABC"
    kinds = {d.kind for d in stream.diagnostics}
    assert {"missing-end", "special-token-in-content"} <= kinds


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=COMPLETION_MESSAGES, last_stop=st.booleans(), finished=FINISHED)
def test_streaming_reassembles_to_the_non_streaming_result(
    messages: list[tuple[str, str, list[int]]], last_stop: bool, finished: bool | None
) -> None:
    tokens = completion_tokens(messages, last_stop)
    chunks = check_matches_non_streaming(ENC, tokens, finished)
    # Cut off: said so by the caller, or (when it says nothing) no stop token at the end.
    cut = finished is False or (finished is None and not (last_stop and messages))
    assert (reassemble_chat(chunks)["finish_reason"] == "length") == cut
    message = reassemble_chat(chunks)["message"]
    texts = [t for k, t, _ in messages if k in ("commentary", "final") and t]
    assert message["content"] == ("\n\n".join(texts) if texts else None)
    calls = [t for k, t, _ in messages if k not in ("analysis", "commentary", "final")]
    assert [c["function"]["arguments"] for c in message.get("tool_calls", [])] == calls


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKEN_SOUP_VOCAB), max_size=40), FINISHED)
def test_any_token_soup_streams_without_error_or_markup(
    tokens: list[int], finished: bool | None
) -> None:
    chunks = check_matches_non_streaming(ENC, tokens, finished)
    for delta in deltas(chunks):
        assert "<|" not in (delta.get("content") or "")
        for call in delta.get("tool_calls", []):
            assert "<|" not in call["function"].get("arguments", "")
            assert "<|" not in call["function"].get("name", "")


def _dumps(chunk: dict[str, Any]) -> bytes:
    return json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("reasoning_field", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("logprobs", [False, True])
def test_encode_chunk_is_the_json_encoders_bytes(reasoning_field: str, logprobs: bool) -> None:
    # Text deltas come from a template (harmonia serve encodes one per token); every
    # chunk, templated or not, must be the encoder's bytes exactly.
    text = (
        '<|channel|>analysis<|message|>Quote " back\\slash\ttab é 漢字 🙂\u2028<|end|>'
        "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
        '<|message|>{"a": "\\n"}<|call|>'
    )
    tokens = ENC.encode(text, allowed_special="all")
    stream = ChatCompletionStream(
        ENC, model='m"odel', ids="seed", reasoning_field=reasoning_field, logprobs=logprobs
    )
    chunks: list[dict[str, Any]] = []
    for token in tokens:
        chunks += stream.feed(token, TokenLogprob(token, -0.5) if logprobs else None)
    chunks += stream.finish()
    assert len(chunks) > 10
    for chunk in chunks:
        assert stream.encode_chunk(chunk) == _dumps(chunk)
    assert stream._heads  # the template was used (for the reasoning deltas at least)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), created=st.integers(min_value=0, max_value=2**40))
def test_a_text_delta_of_any_text_encodes_as_the_encoder_does(text: str, created: int) -> None:
    stream = ChatCompletionStream(ENC, model="gpt-oss-20b", ids="seed", created=created)
    tokens = ENC.encode("<|channel|>final<|message|>", allowed_special="all")
    chunks = [c for t in tokens for c in stream.feed(t)]
    delta = stream._chunk({"content": text}, None)  # the shape _translate gives
    for chunk in [*chunks, delta]:
        try:
            expected = _dumps(chunk)
        except UnicodeEncodeError:  # a lone surrogate: neither path can write it
            with pytest.raises(UnicodeEncodeError):
                stream.encode_chunk(chunk)
            continue
        assert stream.encode_chunk(chunk) == expected


def test_a_chunk_changed_after_it_was_made_is_encoded_whole() -> None:
    stream = ChatCompletionStream(ENC, model="gpt-oss-20b", ids="seed", created=7)
    chunk = stream._chunk({"content": "hi"}, None)
    chunk["model"] = "other"  # no longer this stream's fixed fields: no template
    chunk["choices"][0]["delta"]["content"] = "bye"
    assert stream.encode_chunk(chunk) == _dumps(chunk)
    assert b'"other"' in stream.encode_chunk(chunk)
