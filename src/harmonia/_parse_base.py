"""The parser's fields and what all its actions share: events, diagnostics, header reading.

:class:`ParserBase` is the bottom of the parser's class chain::

    ParserBase (_parse_base) <- ContentActions (_parse_content)
        <- LenientActions (_recovery) <- StreamableParser (_parser)

Each class only uses what the classes before it define, and each module imports
only the modules before it (plus :mod:`._parse_events`); none imports
:mod:`._parser`. The fields are slots here, so that every layer's methods read
them as fast as :class:`~harmonia.StreamableParser`'s own; ``StreamableParser.__init__``
gives them their first values.
"""

from __future__ import annotations

from typing import Final

from ._enums import Role
from ._header import HeaderError, MessageHeader, parse_header
from ._parse_events import Diagnostic, ParserEvent

# -- header decoding and the header cache --------------------------------------------

_HEADER_CACHE: dict[tuple[tuple[int, ...], Role | None], MessageHeader | str] = {}
_HEADER_CACHE_LIMIT: Final = 4096


def header_strict(table: list[bytes], tokens: list[int], role: Role | None) -> MessageHeader:
    """The strict reading of header tokens (cached: headers repeat). Raises HeaderError."""
    key = (tuple(tokens), role)
    hit = _HEADER_CACHE.get(key)
    if hit is None:
        try:
            text = _join_bytes(table, tokens).decode()
        except (IndexError, TypeError, UnicodeDecodeError):
            hit = "could not decode header"
        else:
            try:
                hit = parse_header(text, role)
            except HeaderError as exc:
                hit = exc.reason
        if len(_HEADER_CACHE) >= _HEADER_CACHE_LIMIT:
            _HEADER_CACHE.clear()
        _HEADER_CACHE[key] = hit
    if isinstance(hit, str):
        raise HeaderError(hit)
    return hit


def _join_bytes(table: list[bytes], tokens: list[int]) -> bytes:
    if tokens and min(tokens) < 0:
        raise IndexError("negative token id")
    return b"".join([table[t] for t in tokens])


# -- the fields ------------------------------------------------------------------------


class ParserBase:
    """The parser's state, and the helpers every action uses."""

    __slots__ = (
        "_default_role",
        "_delta",
        "_diagnostics",
        "_events",
        "_header",
        "_header_first",
        "_header_tokens",
        "_implicit",
        "_joined",
        "_joined_n",
        "_junk",
        "_junk_start",
        "_messages",
        "_next_role",
        "_pending",
        "_pieces",
        "_strict",
        "_swallow",
        "_table",
        "_tokens",
    )

    _table: list[bytes]  # token id -> bytes
    _strict: bool
    _tokens: list[int]  # every token processed
    _next_role: Role | None  # the role given for the next header, if any
    _default_role: Role  # the role of a message recovered without one
    # HEADER: the header's tokens, the index of the first, and whether lenient
    # mode began it without <|start|>.
    _header_tokens: list[int]
    _header_first: int
    _implicit: bool
    # CONTENT: the header; the text in pieces, joined lazily; bytes waiting for
    # the rest of a character; whether an unknown id swallows the rest (strict);
    # the last token's text.
    _header: MessageHeader | None
    _pieces: list[str]
    _joined: str
    _joined_n: int
    _pending: bytes
    _swallow: bool
    _delta: str | None
    # Results: the finished messages, the diagnostics, and the events of the
    # current feed() call (None outside feed()).
    _messages: list[tuple[MessageHeader, str]]
    _diagnostics: list[Diagnostic]
    _events: list[ParserEvent] | None
    # EXPECT_START (lenient): skipped tokens, not yet reported, and where they began.
    _junk: list[int]
    _junk_start: int

    def _index(self) -> int:
        return len(self._tokens) - 1

    def _emit(self, event: ParserEvent) -> None:
        if self._events is not None:
            self._events.append(event)

    def _diagnose(self, diagnostic: Diagnostic) -> None:
        self._diagnostics.append(diagnostic)
        self._emit(diagnostic)
