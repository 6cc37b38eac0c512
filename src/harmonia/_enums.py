"""The enumerations of the harmony data model (values as in ``openai_harmony``)."""

from __future__ import annotations

from enum import Enum
from typing import Final

from ._errors import InputError
from ._names import WordEnum


class Role(str, Enum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    TOOL = "tool"

    @classmethod
    def _missing_(cls, value: object) -> Role:
        # The reference's words first (code matches on them), then the fix.
        valid = ", ".join(r.value for r in cls)
        raise InputError(f"Unknown role: {value!r} (use one of: {valid})")


#: The roles written as a word, or ``role:name`` (a tool is written as its name).
NAMED_ROLES: Final[dict[str, Role]] = {r.value: r for r in Role if r is not Role.TOOL}


class ReasoningEffort(str, Enum):
    """How hard the model should think; rendered lower-case (``Reasoning: high``)."""

    LOW = "Low"
    MEDIUM = "Medium"
    HIGH = "High"

    @classmethod
    def _missing_(cls, value: object) -> ReasoningEffort:
        # Capitalised only, as openai_harmony's enum and pydantic model accept; the
        # lowercase API spelling belongs to OpenAI requests (harmonia.openai_compat).
        valid = ", ".join(repr(e.value) for e in cls)
        hint = ""
        if isinstance(value, str) and value.capitalize() in {e.value for e in cls}:
            hint = f"; write {value.capitalize()!r} (harmony JSON spells it capitalised)"
        raise InputError(f"Unknown reasoning effort: {value!r} (use one of: {valid}){hint}")


class HarmonyEncodingName(WordEnum):
    """The encodings :func:`load_harmony_encoding` knows."""

    HARMONY_GPT_OSS = "HarmonyGptOss"


class StreamState(Enum):
    """Where a :class:`StreamableParser` is within the harmony grammar."""

    EXPECT_START = "ExpectStart"
    HEADER = "Header"
    CONTENT = "Content"
