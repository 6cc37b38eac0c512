"""harmonia: the harmony response format for gpt-oss, exact, offline and fast.

A drop-in replacement for ``openai_harmony``: the same names and behaviour, with
extensions documented in the README.
"""

from ._content import (
    ChannelConfig,
    Content,
    DeveloperContent,
    ResponseFormat,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from ._cot import COT_POLICIES
from ._encoding import HarmonyEncoding, load_harmony_encoding
from ._enums import HarmonyEncodingName, ReasoningEffort, Role, StreamState
from ._errors import (
    DecodeError,
    DisallowedSpecialTokenError,
    HarmonyError,
    InputError,
    ModelOutputError,
    ParseError,
    RenderError,
    VocabularyError,
)
from ._loader import verify_vocabulary, write_tiktoken_file
from ._message import (
    Author,
    Conversation,
    Message,
    RenderConversationConfig,
    RenderOptions,
)

__all__ = [
    "COT_POLICIES",
    "Author",
    "ChannelConfig",
    "Content",
    "Conversation",
    "DecodeError",
    "DeveloperContent",
    "DisallowedSpecialTokenError",
    "HarmonyEncoding",
    "HarmonyEncodingName",
    "HarmonyError",
    "InputError",
    "Message",
    "ModelOutputError",
    "ParseError",
    "ReasoningEffort",
    "RenderConversationConfig",
    "RenderError",
    "RenderOptions",
    "ResponseFormat",
    "Role",
    "StreamState",
    "SystemContent",
    "TextContent",
    "ToolDescription",
    "ToolNamespaceConfig",
    "VocabularyError",
    "load_harmony_encoding",
    "verify_vocabulary",
    "write_tiktoken_file",
]
