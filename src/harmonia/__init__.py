"""harmonia: the harmony response format for gpt-oss, exact, offline and fast.

A drop-in replacement for ``openai_harmony``: the same names and behaviour, with
extensions documented in the README.
"""

from __future__ import annotations

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
from ._encoding import HarmonyEncoding, load_harmony_encoding
from ._enums import HarmonyEncodingName, ReasoningEffort, Role, StreamState
from ._errors import (
    DecodeError,
    DisallowedSpecialTokenError,
    EngineError,
    HarmonyError,
    InputError,
    InputTypeError,
    ModelOutputError,
    ParseError,
    RenderError,
    SandboxUnavailableError,
    ToolError,
    VocabularyError,
)
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
    EncodingLike,
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
from ._render import COT_POLICIES
from ._render.spans import (
    MessageSpan,
    MessageSpans,
    RenderedConversation,
    RenderMode,
    SpanRecord,
)
from ._tokenizer import Tokenizer, verify_vocabulary, write_tiktoken_file
from ._turn import (
    ItemAdded,
    ItemDelta,
    ItemDone,
    OutputAssembler,
    OutputDiagnostic,
    OutputEvent,
    OutputItem,
    TurnEnd,
    TurnSummary,
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
    "EncodingLike",
    "EngineError",
    "HarmonyEncoding",
    "HarmonyEncodingName",
    "HarmonyError",
    "InputError",
    "InputTypeError",
    "ItemAdded",
    "ItemDelta",
    "ItemDone",
    "Message",
    "MessageDone",
    "MessageHeader",
    "MessageSpan",
    "MessageSpans",
    "MessageStarted",
    "ModelOutputError",
    "OutputAssembler",
    "OutputDiagnostic",
    "OutputEvent",
    "OutputItem",
    "ParseError",
    "ParseResult",
    "ParserEvent",
    "ReasoningEffort",
    "RecoveryKind",
    "RenderConversationConfig",
    "RenderError",
    "RenderMode",
    "RenderOptions",
    "RenderedConversation",
    "ResponseFormat",
    "Role",
    "SandboxUnavailableError",
    "SpanRecord",
    "StreamState",
    "StreamableParser",
    "SystemContent",
    "TextContent",
    "Tokenizer",
    "ToolDescription",
    "ToolError",
    "ToolNamespaceConfig",
    "TurnEnd",
    "TurnSummary",
    "VocabularyError",
    "__version__",
    "load_harmony_encoding",
    "parse_completion",
    "parse_text",
    "verify_vocabulary",
    "write_tiktoken_file",
]


def __getattr__(name: str) -> str:
    # The version is read from the installed package's metadata (pyproject.toml is
    # its one source), on first use: importlib.metadata costs milliseconds that
    # ``import harmonia`` should not pay.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("harmonia")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
