"""The CONTENT state: a message's bytes, decoded incrementally into text.

:class:`ContentActions` holds the table's content actions (``add_content``,
``finish_message``) and the decoding behind them: a delta never holds half a
character, bytes that are not UTF-8 become U+FFFD (diagnosed), and an unknown
token id is handled as the reference does (strict) or replaced (lenient).
``_add_content`` is the parser's hot path.

Layering: imports :mod:`._parse_base` and :mod:`._parse_events`; imported by
:mod:`._recovery` (whose class builds on this one), never the other way round.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import Final

from ._header import MessageHeader
from ._parse_base import ParserBase
from ._parse_events import (
    ContentDelta,
    Diagnostic,
    MessageDone,
    MessageStarted,
    RecoveryKind,
    make_message,
)

_REPLACEMENT: Final = "\ufffd"


class ContentActions(ParserBase):
    """The content actions of :class:`~harmonia.StreamableParser` (a mixin)."""

    __slots__ = ()

    def _content_text(self) -> str:
        # Join only the pieces added since the last call: O(new) per call.
        pieces = self._pieces
        if self._joined_n < len(pieces):
            self._joined += "".join(pieces[self._joined_n :])
            self._joined_n = len(pieces)
        return self._joined

    def _reset_content(self, header: MessageHeader | None) -> None:
        """Start (or end) a message: no text, no pending bytes, no delta."""
        self._header = header
        self._pieces = []
        self._joined = ""
        self._joined_n = 0
        self._pending = b""
        self._swallow = False
        self._delta = None

    def _begin_content(self, header: MessageHeader) -> None:
        self._reset_content(header)
        if self._events is not None:
            self._emit(MessageStarted(header, self._index()))

    def _add_content(self, token: int) -> None:
        # The hot path: keep it short.
        if self._swallow:
            self._delta = None
            return
        if token >= 0:
            try:
                data = self._table[token]
            except IndexError:
                self._unknown_content_token(token)
                return
        else:
            self._unknown_content_token(token)
            return
        if self._pending:
            data = self._pending + data
            self._pending = b""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = self._decode_damaged(data, token)
            if not text:
                self._delta = None
                return
        self._pieces.append(text)
        self._delta = text
        if self._events is not None:
            self._events.append(ContentDelta(text, len(self._tokens) - 1))

    def _decode_damaged(self, data: bytes, token: int) -> str:
        """Decode what can be decoded; keep an unfinished character for later.

        Strict mode takes the reference's step: the valid prefix, then at most
        one U+FFFD, the bytes after it held back for the next token (so the
        per-token deltas and, after an unknown id, the final text are the
        reference's; the held-back bytes still reach the final text). Lenient
        mode decodes everything it can.
        """
        if self._strict:
            try:
                data.decode()
            except UnicodeDecodeError as exc:
                valid = exc.start
                text = data[:valid].decode()
                if exc.reason == "unexpected end of data" and exc.end == len(data):
                    self._pending = data[valid:]  # incomplete: wait for more bytes
                    return text
                text += _REPLACEMENT
                self._pending = data[exc.end :]
                used = exc.end
            else:  # pragma: no cover - the caller saw an error
                raise AssertionError("not damaged")
        else:
            text, used = utf_8_decode(data, "replace", False)
            self._pending = data[used:]
        try:
            data[:used].decode()
        except UnicodeDecodeError:
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    self._index(),
                    "content bytes are not valid UTF-8; replaced by U+FFFD",
                    kept=text,
                    tokens=(token,),
                )
            )
        return text

    def _unknown_content_token(self, token: int) -> None:
        index = self._index()
        if self._strict:
            # The reference keeps the id pending; nothing after it decodes, and
            # the message ends with one U+FFFD. Reproduced, but not silently.
            self._swallow = True
            self._delta = None
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_TOKEN,
                    index,
                    f"unknown token id {token} in content: the rest of the message is "
                    "replaced by one U+FFFD (the reference's behaviour; use strict=False "
                    "to keep it)",
                    tokens=(token,),
                )
            )
            return
        data = self._pending + b"\xff"  # never valid: one U+FFFD for the id
        self._pending = b""
        text = data.decode("utf-8", "replace")
        self._diagnose(
            Diagnostic(
                RecoveryKind.INVALID_TOKEN,
                index,
                f"unknown token id {token} in content: replaced by U+FFFD",
                kept=text,
                tokens=(token,),
            )
        )
        self._pieces.append(text)
        self._delta = text
        self._emit(ContentDelta(text, index))

    def _finish_message(self, token: int | None) -> None:
        header = self._header
        assert header is not None
        index = self._index() if token is not None else len(self._tokens)
        text = self._content_text()
        tail = _REPLACEMENT if self._swallow else ""
        if self._pending:
            tail += self._pending.decode("utf-8", "replace")
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    index,
                    "message ended inside a multi-byte character; replaced by U+FFFD",
                    kept=tail,
                )
            )
        if tail:
            text += tail
            self._emit(ContentDelta(tail, index))
        self._messages.append((header, text))
        if self._events is not None:
            self._emit(MessageDone(make_message(header, text), index, token))
        self._reset_content(None)
