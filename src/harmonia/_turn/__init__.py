"""The turn layer: a turn of model output read into items, streaming.

:mod:`.assembler` reads the tokens a model sampled after ``<|start|>assistant``
into items (reasoning, text, tool calls) with streaming events and a summary of
how the turn ended; :mod:`.items` holds those values; :mod:`.recipients` the
recipient and channel rules shared with the OpenAI conversions and constrained
decoding, and :func:`~.recipients.classify`, the one reading of a header that
the stream, the agent loop, tool dispatch and the key rule share. The agent
loop, the server and the OpenAI conversions stand on this layer.
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
