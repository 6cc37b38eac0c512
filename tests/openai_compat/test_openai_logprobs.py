"""Log-probabilities in the streams: OpenAI's shape, the visible text's tokens only, aligned."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_helpers import (
    TOKEN_SOUP_VOCAB,
    encode,
    valid_chunk,
    valid_completion,
    valid_event,
    valid_response,
)

from harmonia import InputError, load_harmony_encoding
from harmonia.engines import TokenLogprob
from harmonia.openai_compat import (
    ChatCompletionStream,
    ResponseStream,
    chat_completion_from_tokens,
    response_from_tokens,
)
from harmonia.openai_compat._chat import SEPARATOR

ENC = load_harmony_encoding("HarmonyGptOss")
REPLY = (
    "<|channel|>analysis<|message|>Think.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Yes, 𝔘 it is!<|return|>"
)


def lp(token: int) -> TokenLogprob:
    """A distinct, checkable log-probability per id, with two alternatives."""
    value = -((token % 97) + 1) / 10
    return TokenLogprob(token, value, ((token, value), ((token + 1) % 1000, value - 1)))


def chat(tokens: list[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    stream = ChatCompletionStream(ENC, model="m", ids="seed", created=1, logprobs=True)
    chunks = stream.feed_many(tokens, [lp(t) for t in tokens]) + stream.finish()
    for chunk in chunks:
        valid_chunk(chunk)
    valid_completion(stream.completion)
    return chunks, stream.completion


def text_ids(text: str) -> list[int]:
    return ENC.encode_ordinary(text)


def test_chat_reports_the_content_tokens_only_with_the_chunk_holding_them() -> None:
    chunks, completion = chat(encode(ENC, REPLY))
    entries = completion["choices"][0]["logprobs"]["content"]
    expected = text_ids("Checking.") + text_ids("Yes, 𝔘 it is!")
    assert [e["logprob"] for e in entries] == [lp(t).logprob for t in expected]
    assert b"".join(bytes(e["bytes"]) for e in entries) == "Checking.Yes, 𝔘 it is!".encode()
    for entry, token in zip(entries, expected, strict=True):
        raw = ENC.decode_bytes([token])
        assert entry["bytes"] == list(raw)
        assert entry["token"] == raw.decode("utf-8", "replace")
        assert [alt["logprob"] for alt in entry["top_logprobs"]] == [v for _, v in lp(token).top]
        assert entry["top_logprobs"][0]["token"] == entry["token"]
    streamed: list[Any] = []
    for chunk in chunks:
        choice = chunk["choices"][0] if chunk["choices"] else None
        if choice is None or choice["logprobs"] is None:
            assert not (choice and choice["delta"].get("content")), "content without logprobs"
            continue
        shown = b"".join(bytes(e["bytes"]) for e in choice["logprobs"]["content"])
        delta = choice["delta"]["content"].removeprefix(SEPARATOR)
        # A split character's text waits for its last id; its ids' bytes do not.
        assert shown.decode("utf-8", "replace").rstrip("\ufffd") in (delta, delta + "")
        streamed += choice["logprobs"]["content"]
    assert streamed == entries


def test_without_logprobs_nothing_changes() -> None:
    tokens = encode(ENC, REPLY)
    stream = ChatCompletionStream(ENC, model="m", ids="seed", created=1)
    chunks = stream.feed_many(tokens, [lp(t) for t in tokens]) + stream.finish()
    assert all(c["choices"][0]["logprobs"] is None for c in chunks if c["choices"])
    assert stream.completion["choices"][0]["logprobs"] is None


def test_a_text_token_without_its_own_logprob_is_an_error() -> None:
    tokens = encode(ENC, "<|channel|>final<|message|>Hi there<|return|>")
    stream = ChatCompletionStream(ENC, model="m", logprobs=True)
    stream.feed_many(tokens[:3], [lp(t) for t in tokens[:3]])
    with pytest.raises(InputError, match="came with none"):
        stream.feed(tokens[3])
    with pytest.raises(InputError, match="that of id"):
        stream.feed(tokens[3], lp(tokens[3] + 1))
    with pytest.raises(InputError, match="parallel"):
        stream.feed_many(tokens[3:], [lp(tokens[3])])


def test_reasoning_and_headers_may_come_without_logprobs() -> None:
    tokens = encode(ENC, "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant")
    stream = ChatCompletionStream(ENC, model="m", logprobs=True)
    stream.feed_many(tokens)  # nothing visible: nothing needed
    stream.finish()
    assert stream.completion["choices"][0]["logprobs"] == {"content": [], "refusal": None}


def test_very_unlikely_is_minus_9999() -> None:
    tokens = encode(ENC, "<|channel|>final<|message|>Hi<|return|>")
    scores = [TokenLogprob(t, -math.inf, ((t, -1e6),)) for t in tokens]
    stream = ChatCompletionStream(ENC, model="m", logprobs=True)
    stream.feed_many(tokens, scores)
    stream.finish()
    (entry,) = stream.completion["choices"][0]["logprobs"]["content"]
    assert entry["logprob"] == -9999.0 and entry["top_logprobs"][0]["logprob"] == -9999.0


def test_responses_messages_carry_their_own_logprobs() -> None:
    tokens = encode(ENC, REPLY)
    stream = ResponseStream(ENC, model="m", ids="seed", created_at=1, logprobs=True)
    events = stream.feed_many(tokens, [lp(t) for t in tokens]) + stream.finish()
    for event in events:
        valid_event(event)
    messages = [item for item in stream.response["output"] if item["type"] == "message"]
    assert [m["content"][0]["text"] for m in messages] == ["Checking.", "Yes, 𝔘 it is!"]
    for message, text in zip(messages, ["Checking.", "Yes, 𝔘 it is!"], strict=True):
        part = message["content"][0]
        assert [e["logprob"] for e in part["logprobs"]] == [lp(t).logprob for t in text_ids(text)]
        # The events carry the part's entries, bytes included (the OpenResponses spec
        # requires them there).
        shape = part["logprobs"]
        assert all("bytes" in e and all("bytes" in a for a in e["top_logprobs"]) for e in shape)
        item_events = [e for e in events if e.get("item_id") == message["id"]]
        deltas = [e for e in item_events if e["type"] == "response.output_text.delta"]
        assert [x for e in deltas for x in e["logprobs"]] == shape
        (done,) = [e for e in item_events if e["type"] == "response.output_text.done"]
        assert done["logprobs"] == shape
    reasoning = stream.response["output"][0]
    assert reasoning["type"] == "reasoning"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TOKEN_SOUP_VOCAB), max_size=40))
def test_any_token_soup_keeps_chunks_valid_and_logprobs_never_wrong(tokens: list[int]) -> None:
    # Text the parser recovers from a broken header (no <|message|>) is normalised
    # (its words stripped), so its tokens may have none: never wrong ones.
    stream = ChatCompletionStream(ENC, model="m", ids="seed", created=1, logprobs=True)
    chunks = stream.feed_many(tokens, [lp(t) for t in tokens]) + stream.finish()
    for chunk in chunks:
        valid_chunk(chunk)
    completion = stream.completion
    valid_completion(completion)
    entries = completion["choices"][0]["logprobs"]["content"]
    streamed = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert streamed == entries
    by_logprob = {lp(t).logprob for t in tokens}
    assert all(e["logprob"] in by_logprob for e in entries)
    for item in stream._assembler.items:
        mine = stream.item_logprobs(item)
        if item.kind != "text":
            assert mine == []
        elif mine:
            joined = b"".join(bytes(e["bytes"]) for e in mine)
            assert joined.decode("utf-8", "replace") == item.text


def test_text_recovered_from_a_header_keeps_its_tokens_logprobs() -> None:
    tokens = encode(ENC, "Hello there<|end|>")  # no header: the parser keeps it as text
    _, completion = chat(tokens)
    choice = completion["choices"][0]
    assert choice["message"]["content"] == "Hello there"
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == [
        lp(t).logprob for t in tokens[:-1]
    ]


def test_the_non_streaming_converters_take_logprobs_too() -> None:
    tokens = encode(ENC, REPLY)
    scores = [lp(t) for t in tokens]
    _, completion = chat(tokens)
    whole = chat_completion_from_tokens(
        ENC, tokens, model="m", ids="seed", created=1, logprobs=scores
    )
    valid_completion(whole)
    assert whole == completion
    stream = ResponseStream(ENC, model="m", ids="seed", created_at=1, logprobs=True)
    stream.feed_many(tokens, scores)
    stream.finish()
    response = response_from_tokens(
        ENC, tokens, model="m", ids="seed", created_at=1, logprobs=scores
    )
    valid_response(response)
    assert response == stream.response
    assert response["output"][-1]["content"][0]["logprobs"]
