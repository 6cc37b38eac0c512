"""Which JSON a conversation file is: harmony's own or an OpenAI Chat Completions request.

``harmonia render`` and ``harmonia chat --load`` read the same files, so they
decide the same way, by fields only one format has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from .._errors import InputError
from .._message import Conversation

FORMAT_NAMES: Final = {"harmony": "harmony JSON", "chat": "a Chat Completions request"}

# Fields only harmony's own JSON (Conversation.to_json) has, and only a Chat request has.
_HARMONY_KEYS: Final = ("channel", "recipient", "content_type")
_HARMONY_PARTS: Final = frozenset({"system_content", "developer_content"})
_CHAT_KEYS: Final = (
    "tool_calls",
    "tool_call_id",
    "function_call",
    "refusal",
    "reasoning_content",
    "reasoning",
    "thinking",
)
_SHARED_PARTS: Final = frozenset({"text"})


def detect_format(data: Any) -> tuple[Literal["harmony", "chat"], str]:
    """Which JSON ``data`` is, and why: harmony's own JSON or a Chat Completions request.

    A conversation that has neither format's own fields (only roles and string
    or text-part contents) is read as a Chat request: that is the shape people
    write by hand, and ``Conversation.to_json`` always writes ``"name"``.
    """
    if isinstance(data, list):
        return "harmony", "a bare list of messages"
    if not isinstance(data, Mapping):
        raise InputError(
            f"expected a JSON object with 'messages', not a JSON {type(data).__name__}"
        )
    chat = [f"field {key!r}" for key in data if key != "messages"][:1]
    harmony: list[str] = []
    messages = data.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, Mapping):
            continue
        where = f"messages[{i}]"
        harmony += [f"{where}.{k}" for k in _HARMONY_KEYS if message.get(k) is not None]
        if "name" in message and message["name"] is None:
            harmony.append(f"{where}.name: null")
        chat += [f"{where}.{k}" for k in _CHAT_KEYS if k in message]
        if message.get("role") == "function":
            chat.append(f"{where}.role 'function'")
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in _HARMONY_PARTS:
                harmony.append(f"{where}.content[{j}] of type {kind!r}")
            elif kind not in _SHARED_PARTS:
                chat.append(f"{where}.content[{j}] of type {kind!r}")
    if harmony and chat:
        raise InputError(
            f"the JSON mixes harmony fields ({harmony[0]}) and Chat request fields ({chat[0]}); "
            "give one format, or choose with --input-format"
        )
    if harmony:
        return "harmony", harmony[0]
    if chat:
        return "chat", chat[0]
    return "chat", "no harmony-only fields"


def load_conversation(data: Any, kind: Literal["harmony", "chat"]) -> Conversation:
    """A conversation from harmony JSON or an OpenAI Chat Completions request."""
    if kind == "harmony":
        return Conversation.from_dict(data)
    from ._chat import chat_request_to_conversation

    return chat_request_to_conversation(data)
