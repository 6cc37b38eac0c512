"""Input helpers for the command line: reading JSON, token lists and conversations."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from .._errors import InputError
from .._message import Conversation

_HARMONY_PART_TYPES = frozenset({"text", "system_content", "developer_content"})


def read_input(path: str) -> str:
    """The text of ``path``, or of standard input for ``-``."""
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_json(path: str) -> Any:
    text = read_input(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = "standard input" if path == "-" else path
        raise InputError(f"{where} is not JSON: {exc}") from None


def is_harmony_json(data: Any) -> bool:
    """Whether ``data`` is harmony's own conversation JSON (``Conversation.to_json``)."""
    if isinstance(data, Mapping):
        if set(data) != {"messages"}:
            return False
        data = data["messages"]
    if not isinstance(data, list):
        return False
    for message in data:
        if not isinstance(message, Mapping) or "tool_calls" in message or "tool_call_id" in message:
            return False
        content = message.get("content")
        if isinstance(content, list) and not all(
            isinstance(p, Mapping) and p.get("type") in _HARMONY_PART_TYPES for p in content
        ):
            return False
    return True


def load_conversation(data: Any) -> Conversation:
    """A conversation from harmony JSON or an OpenAI Chat Completions request."""
    if is_harmony_json(data):
        return Conversation.from_dict(data)
    from ..openai_compat import chat_request_to_conversation

    return chat_request_to_conversation(data)


_INT_LIST = re.compile(r"^[\s\[\],0-9-]*$")


def parse_token_list(text: str) -> list[int] | None:
    """Token ids written as a JSON list or separated by spaces/commas, else ``None``."""
    stripped = text.strip()
    if not stripped or not _INT_LIST.match(stripped):
        return None
    try:
        return [int(t) for t in re.split(r"[\s,\[\]]+", stripped) if t]
    except ValueError:
        return None
