"""The enumerations of the harmony data model (values as in ``openai_harmony``)."""

from __future__ import annotations

from enum import Enum

from ._errors import InputError


class Role(str, Enum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    TOOL = "tool"

    @classmethod
    def _missing_(cls, value: object) -> Role:
        raise InputError(f"Unknown role: {value!r}")


class ReasoningEffort(str, Enum):
    """How hard the model should think; rendered lower-case (``Reasoning: high``)."""

    LOW = "Low"
    MEDIUM = "Medium"
    HIGH = "High"


class HarmonyEncodingName(str, Enum):
    """The encodings :func:`load_harmony_encoding` knows."""

    HARMONY_GPT_OSS = "HarmonyGptOss"

    def __str__(self) -> str:
        return str(self.value)


class StreamState(Enum):
    """Where a :class:`StreamableParser` is within the harmony grammar."""

    EXPECT_START = "ExpectStart"
    HEADER = "Header"
    CONTENT = "Content"
