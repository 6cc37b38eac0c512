"""The render layer: messages and conversations to token ids, byte-exact.

A sibling of the parse layer (neither imports the other); it stands on the
tokenizer and the data model.
"""

from .cot import COT_POLICIES
from .renderer import Renderer, typescript_converter
from .spans import (
    PART_NAMES,
    RENDER_MODES,
    MessageSpan,
    MessageSpans,
    PartName,
    RenderedConversation,
    RenderMode,
    SpanRecord,
)

__all__ = [
    "COT_POLICIES",
    "PART_NAMES",
    "RENDER_MODES",
    "MessageSpan",
    "MessageSpans",
    "PartName",
    "RenderMode",
    "RenderedConversation",
    "Renderer",
    "SpanRecord",
    "typescript_converter",
]
