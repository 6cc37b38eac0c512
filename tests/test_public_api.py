"""The public API is pinned: adding or removing a name from ``harmonia.__all__``
is a decision, made here on purpose, never a side effect of moving modules."""

from __future__ import annotations

import sys
from pathlib import Path

import harmonia

PUBLIC = [
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


def test_all_is_pinned() -> None:
    assert harmonia.__all__ == PUBLIC


def test_every_public_name_resolves() -> None:
    for name in harmonia.__all__:
        assert getattr(harmonia, name) is not None, name


def test_every_public_error_is_a_harmony_error() -> None:
    errors = [getattr(harmonia, n) for n in PUBLIC if n.endswith("Error")]
    assert errors and all(issubclass(e, harmonia.HarmonyError) for e in errors)


def test_version_comes_from_the_package_metadata() -> None:
    if sys.version_info >= (3, 11):
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
        assert harmonia.__version__ == declared
    assert harmonia.__version__.count(".") >= 1


def test_signature_types_are_exported() -> None:
    enc = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
    assert isinstance(enc.tokenizer, harmonia.Tokenizer)
    # A Protocol (not runtime-checkable): exported so callers can annotate with it.
    assert isinstance(harmonia.EncodingLike, type)
