"""Shared helpers for the OpenAI-compat tests (validation with the ``openai`` types).

Every produced object is validated with the official ``openai`` package's
pydantic models *and* checked for keys those models do not know (pydantic
accepts unknown keys silently, so a misspelt field would otherwise pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

import harmonia
from harmonia import Conversation, HarmonyEncoding, RenderConversationConfig, Role
from harmonia.openai_compat import IdGenerator, seed_from_tokens

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402

#: Keys we add on purpose that the openai models do not declare: the reasoning of a
#: chat message, and fields only some ``openai`` releases declare (``phase`` and
#: ``cache_write_tokens`` are recent; ``name`` of ``function_call_arguments.done`` is
#: required by 3.0 and gone by 3.54).
EXTRA_OK = frozenset({"reasoning_content", "reasoning", "phase", "cache_write_tokens", "name"})

_EVENT = TypeAdapter(ResponseStreamEvent)


def _no_unknown_fields(value: object, where: str = "") -> None:
    if isinstance(value, BaseModel):
        extra = set(value.model_extra or {}) - EXTRA_OK
        assert not extra, f"unknown fields {extra} at {where or type(value).__name__}"
        for name in type(value).model_fields:
            _no_unknown_fields(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _no_unknown_fields(v, f"{where}[{i}]")


def valid_completion(data: Mapping[str, Any]) -> ChatCompletion:
    model = ChatCompletion.model_validate(data)
    _no_unknown_fields(model)
    return model


def valid_chunk(data: Mapping[str, Any]) -> ChatCompletionChunk:
    model = ChatCompletionChunk.model_validate(data)
    _no_unknown_fields(model)
    return model


def valid_response(data: Mapping[str, Any]) -> Response:
    model = Response.model_validate(data)
    _no_unknown_fields(model)
    return model


def valid_event(data: Mapping[str, Any]) -> BaseModel:
    model = _EVENT.validate_python(data)
    assert isinstance(model, BaseModel)
    assert model.type == data["type"]  # type: ignore[attr-defined]
    _no_unknown_fields(model)
    return model


def encode(enc: HarmonyEncoding, text: str) -> list[int]:
    return enc.encode(text, allowed_special="all")


def assistant_turn(
    enc: HarmonyEncoding, conv: Conversation, first: int
) -> tuple[list[int], list[int]]:
    """(prompt, completion): messages[first:] rendered as what the model sampled."""
    keep = RenderConversationConfig(cot_policy="keep_all")
    prefix = Conversation.from_messages(conv.messages[:first])
    prompt = enc.render_conversation_for_completion(prefix, Role.ASSISTANT, keep)
    full = enc.render_conversation(conv, keep)
    assert full[: len(prompt)] == prompt
    return prompt, full[len(prompt) :]


def reassemble_chat(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Join chunk deltas into the message a client would build."""
    message: dict[str, Any] = {"role": None, "content": None}
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            if "role" in delta:
                message["role"] = delta["role"]
            for key in ("content", "reasoning_content"):
                if delta.get(key) is not None:
                    message[key] = (message.get(key) or "") + delta[key]
            for call in delta.get("tool_calls", []):
                slot = calls.setdefault(call["index"], {"function": {"arguments": ""}})
                if "id" in call:
                    slot["id"] = call["id"]
                    slot["type"] = call["type"]
                    slot["function"]["name"] = call["function"]["name"]
                slot["function"]["arguments"] += call["function"].get("arguments", "")
            finish = choice["finish_reason"] or finish
    if message["content"] == "":
        message["content"] = None
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"message": message, "finish_reason": finish}


def test_helpers_reject_unknown_fields() -> None:
    data = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "contnet": "typo"},
            }
        ],
    }
    with pytest.raises(AssertionError, match="contnet"):
        valid_completion(data)


def test_ids_are_deterministic_with_a_seed_and_unique() -> None:
    a, b = IdGenerator("s"), IdGenerator("s")
    ids = [a.new("call") for _ in range(50)]
    assert ids == [b.new("call") for _ in range(50)]
    assert len(set(ids)) == 50
    assert IdGenerator("t").new("call") != ids[0]
    # Each prefix counts on its own, so the order of requests does not matter.
    c = IdGenerator("s")
    c.new("msg")
    assert c.new("call") == ids[0]


def test_ids_without_seed_are_random() -> None:
    assert IdGenerator().new("call") != IdGenerator().new("call")
    assert not IdGenerator().deterministic


def test_seed_from_tokens_follows_the_prompt(enc: HarmonyEncoding) -> None:
    one, two = encode(enc, "turn one"), encode(enc, "turn one, turn two")
    assert seed_from_tokens(one) == seed_from_tokens(list(one))
    assert seed_from_tokens(one) != seed_from_tokens(two)


def test_the_encoding_fixture_is_harmony(enc: HarmonyEncoding) -> None:
    assert isinstance(enc, harmonia.HarmonyEncoding)
