"""The turn layer: a turn of model output read into items, streaming.

Its modules and who stands on it: docs/architecture.md (the "turn" row).
"""

from .assembler import OutputAssembler
from .items import (
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    OutputDiagnostic,
    OutputEvent,
    OutputItem,
    TurnEnd,
    TurnSummary,
)
from .recipients import (
    BUILTIN_CALL_CHANNELS,
    FUNCTION_CALL_CHANNELS,
    Reading,
    api_name,
    call_header,
    classify,
    clean_recipient,
    is_builtin_name,
    is_call,
    is_content_type_word,
)

__all__ = [
    "BUILTIN_CALL_CHANNELS",
    "FUNCTION_CALL_CHANNELS",
    "ItemAdded",
    "ItemDelta",
    "ItemDone",
    "ItemKind",
    "OutputAssembler",
    "OutputDiagnostic",
    "OutputEvent",
    "OutputItem",
    "Reading",
    "TurnEnd",
    "TurnSummary",
    "api_name",
    "call_header",
    "classify",
    "clean_recipient",
    "is_builtin_name",
    "is_call",
    "is_content_type_word",
]
