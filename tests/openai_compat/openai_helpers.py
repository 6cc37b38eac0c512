"""Shared helpers for the OpenAI-compat tests (validation with the ``openai`` types).

Test files import this as a plain module (``from openai_helpers import ...``):
pytest's default prepend import mode puts each test file's folder first on
``sys.path`` before importing it (there is no ``tests/__init__.py``), so this file,
beside them, is found; its name is unique across tests/ because every folder's
helpers share one module namespace. It is not a test file, so pytest does not
collect it, and no test file imports another test file.

Every produced object is validated with the official ``openai`` package's
pydantic models *and* checked for keys those models do not know (pydantic
accepts unknown keys silently, so a misspelt field would otherwise pass).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

import harmonia
from harmonia import (
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
    SystemContent,
)
from harmonia._tokenizer import special_tokens as special

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402

#: Keys we add on purpose that the openai models do not declare: the reasoning of a
#: chat message, and fields only some ``openai`` releases declare (``phase`` and
#: ``cache_write_tokens`` are recent; ``name`` of ``function_call_arguments.done`` is
#: required by 3.0 and gone by 3.54); and the keys the OpenResponses spec requires of
#: a response that the openai ``Response`` model does not declare (``store`` and the
#: two penalties), the spec's nested ``error`` of an ``error`` event, and the ``bytes``
#: of the text events' log-probabilities (the spec requires them there).
EXTRA_OK = frozenset(
    {
        "reasoning_content",
        "reasoning",
        "phase",
        "cache_write_tokens",
        "name",
        "store",
        "presence_penalty",
        "frequency_penalty",
        "error",
        "bytes",
    }
)

_EVENT = TypeAdapter(ResponseStreamEvent)
_Model = TypeVar("_Model", bound=BaseModel)


def _no_unknown_fields(value: object, where: str = "") -> None:
    if isinstance(value, BaseModel):
        extra = set(value.model_extra or {}) - EXTRA_OK
        assert not extra, f"unknown fields {extra} at {where or type(value).__name__}"
        for name in type(value).model_fields:
            _no_unknown_fields(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _no_unknown_fields(v, f"{where}[{i}]")


def _valid(model_class: type[_Model], data: Mapping[str, Any]) -> _Model:
    model = model_class.model_validate(data)
    _no_unknown_fields(model)
    return model


def valid_completion(data: Mapping[str, Any]) -> ChatCompletion:
    return _valid(ChatCompletion, data)


def valid_chunk(data: Mapping[str, Any]) -> ChatCompletionChunk:
    return _valid(ChatCompletionChunk, data)


def valid_response(data: Mapping[str, Any]) -> Response:
    return _valid(Response, data)


def valid_event(data: Mapping[str, Any]) -> BaseModel:
    model = _EVENT.validate_python(data)
    assert isinstance(model, BaseModel)
    assert model.type == data["type"]  # type: ignore[attr-defined]
    _no_unknown_fields(model)
    return model


GUIDE = Path(__file__).parent.parent / "golden" / "guide"


def guide_text(name: str, *, joined: bool = False) -> str:
    """The guide's example ``name`` (``golden/guide/<name>.txt``).

    ``joined``: without the line breaks the guide shows before each ``<|start|>``
    (presentation only: the model writes none there).
    """
    text = (GUIDE / f"{name}.txt").read_text(encoding="utf-8")
    return text.replace("\n<|start|>", "<|start|>") if joined else text


def brief(messages: list[Message]) -> list[tuple[str | None, ...]]:
    """The messages after the system and developer ones, each as a tuple of its fields."""
    return [
        (m.author.role.value, m.author.name, m.channel, m.recipient, m.content_type, m.text)
        for m in messages
        if m.author.role not in (Role.SYSTEM, Role.DEVELOPER)
    ]


def developer(messages: list[Message]) -> DeveloperContent:
    content = messages[1].content[0]
    assert isinstance(content, DeveloperContent)
    return content


def system(messages: list[Message]) -> SystemContent:
    content = messages[0].content[0]
    assert isinstance(content, SystemContent)
    return content


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
    message: dict[str, Any] = {"role": None, "content": None, "refusal": None}
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


HARMONY = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)

# Random completions for the streaming property tests: messages of each kind, with
# their text cut at random points and encoded piecewise, and a soup of format tokens.
COMPLETION_HEADERS = {
    "analysis": "<|channel|>analysis<|message|>",
    "commentary": "<|channel|>commentary<|message|>",
    "final": "<|channel|>final<|message|>",
    "call": "<|channel|>commentary to=functions.f{n} <|constrain|>json<|message|>",
    "call_in_role": " to=functions.g<|channel|>analysis<|message|>",
    "browser": "<|channel|>analysis to=browser.search code<|message|>",
    "python": "<|channel|>analysis to=python code<|message|>",
}
TEXTS = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
COMPLETION_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(sorted(COMPLETION_HEADERS)), TEXTS, st.lists(st.integers(0, 30), max_size=4)
    ),
    max_size=5,
)


def completion_tokens(messages: list[tuple[str, str, list[int]]], last_stop: bool) -> list[int]:
    """Tokens of a completion; each text is cut at the given points and encoded piecewise."""
    tokens: list[int] = []
    for n, (kind, text, cuts) in enumerate(messages):
        header = ("" if n == 0 else "<|start|>assistant") + COMPLETION_HEADERS[kind].format(n=n)
        tokens += encode(HARMONY, header)
        points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
        for a, b in itertools.pairwise(points):
            tokens += HARMONY.encode_ordinary(text[a:b])
        stop = "<|call|>" if "call" in kind or kind in ("browser", "python") else "<|end|>"
        if n == len(messages) - 1:
            stop = {"<|end|>": "<|return|>"}.get(stop, stop) if last_stop else ""
        tokens += encode(HARMONY, stop)
    return tokens


TOKEN_SOUP_VOCAB = sorted(
    {special.START, special.END, special.MESSAGE, special.CHANNEL, special.CONSTRAIN}
    | {special.RETURN, special.CALL, special.ENDOFTEXT, 200020}
    | set(
        HARMONY.encode_ordinary(
            'assistant analysis final commentary to=functions.f json hi {"a":1}'
        )
    )
)
