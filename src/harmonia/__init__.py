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
    EngineError,
    HarmonyError,
    InputError,
    ModelOutputError,
    ParseError,
    RenderError,
    SandboxUnavailableError,
    ToolError,
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
from ._parse import (
    ContentDelta,
    Diagnostic,
    MessageDone,
    MessageHeader,
    MessageStarted,
    ParseResult,
    ParserEvent,
    RecoveryKind,
    StreamableParser,
    parse_completion,
    parse_text,
)

__all__ = [
    "COT_POLICIES",
    "Author",
    "ChannelConfig",
    "Content",
    "ContentDelta",
    "Conversation",
    "DecodeError",
    "DeveloperContent",
    "Diagnostic",
    "DisallowedSpecialTokenError",
    "EngineError",
    "HarmonyEncoding",
    "HarmonyEncodingName",
    "HarmonyError",
    "InputError",
    "Message",
    "MessageDone",
    "MessageHeader",
    "MessageStarted",
    "ModelOutputError",
    "ParseError",
    "ParseResult",
    "ParserEvent",
    "ReasoningEffort",
    "RecoveryKind",
    "RenderConversationConfig",
    "RenderError",
    "RenderOptions",
    "ResponseFormat",
    "Role",
    "SandboxUnavailableError",
    "StreamState",
    "StreamableParser",
    "SystemContent",
    "TextContent",
    "ToolDescription",
    "ToolError",
    "ToolNamespaceConfig",
    "VocabularyError",
    "load_harmony_encoding",
    "parse_completion",
    "parse_text",
    "verify_vocabulary",
    "write_tiktoken_file",
]
