"""The parser: token ids to harmony messages, streaming, strict or lenient.

:mod:`.parser` is the one class and its transition tables; :mod:`.content`,
:mod:`.recovery` and :mod:`.header` are its parts; :mod:`.events` the values it
produces; :mod:`.batch` the whole-completion entry points, with :mod:`.fastpath`
for the completions that need none of the parser's recoveries.
"""

from .batch import ParseResult, parse_completion, parse_text
from .events import (
    ContentDelta,
    Diagnostic,
    EncodingLike,
    MessageDone,
    MessageStarted,
    ParserEvent,
    RecoveryKind,
    TokenizerLike,
)
from .header import MessageHeader
from .parser import StreamableParser

__all__ = [
    "ContentDelta",
    "Diagnostic",
    "EncodingLike",
    "MessageDone",
    "MessageHeader",
    "MessageStarted",
    "ParseResult",
    "ParserEvent",
    "RecoveryKind",
    "StreamableParser",
    "TokenizerLike",
    "parse_completion",
    "parse_text",
]
