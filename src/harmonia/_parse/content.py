"""A message's content: token bytes decoded incrementally into text.

:class:`ContentDecoder` is the part of the parser that owns the CONTENT state's
data (the text so far, in pieces; bytes waiting for the rest of a character;
the last token's text) and knows nothing else about the parser: it is given a
token table and token ids, and says what text they add. A delta never holds
half a character, bytes that are not UTF-8 become U+FFFD, and a token id
outside the table is handled as the reference does (``strict``) or replaced.
What it produces goes to an :class:`~.events.Output`: a :class:`ContentDelta`
per piece of text (while events are wanted) and a :class:`Diagnostic` per
repair.

:meth:`ContentDecoder.add` is the parser's hot path: the transition table's
content cell calls it directly.
"""

from __future__ import annotations

from codecs import utf_8_decode
from collections.abc import Sequence
from typing import Final

from .._names import DiagnosticKind
from .events import ContentDelta, Diagnostic, Output

REPLACEMENT: Final = "\ufffd"


class ContentDecoder:
    """Token ids of one message at a time -> text.

    :meth:`add` takes a token that was just appended to ``out.tokens`` (its
    events and diagnostics carry that position).

    >>> out = Output()
    >>> decoder = ContentDecoder([b"Hi", b" \\xf0\\x9f", b"\\x92\\x96"], strict=True, out=out)
    >>> [decoder.add(t) for t in (0, 1, 2)], decoder.text(), out.diagnostics
    (['Hi', ' ', '💖'], 'Hi 💖', [])
    """

    __slots__ = (
        "_joined",
        "_joined_n",
        "_lookup",
        "_out",
        "_pending",
        "_strict",
        "_swallow",
        "_table",
        "delta",
        "pieces",
    )

    def __init__(self, table: list[bytes], *, strict: bool, out: Output) -> None:
        self._table = table
        self._strict = strict
        self._out = out
        self.reset()

    def reset(self) -> None:
        """Forget the message: no text, no pending bytes, no delta."""
        # The text added so far, one piece per add() that added any (do not modify).
        self.pieces: list[str] = []
        self._joined = ""
        self._joined_n = 0
        self._pending = b""
        self._swallow = False  # strict: an unknown id turned the rest into one U+FFFD
        self._lookup: Sequence[bytes] = self._table  # () while the rest is swallowed
        # The text the last add() added (None if none, e.g. half a character).
        self.delta: str | None = None

    @property
    def pending(self) -> bytes:
        """Bytes held back for the rest of a character (or, strict, after an invalid one)."""
        return self._pending

    @property
    def ready(self) -> bool:
        """Whether the next token's text is its bytes decoded on their own.

        True unless bytes are pending or (strict) an unknown id swallows the rest
        of the message. While it is true, a token whose bytes are valid UTF-8 adds
        exactly their text: appended to :attr:`pieces`, and the :attr:`delta`.
        The parser takes that step itself for content tokens (its hot path).
        """
        return not self._pending and not self._swallow

    def text(self) -> str:
        """The text added so far (what :meth:`flush` adds not included)."""
        # Join only the pieces added since the last call, appended in place: the slot
        # is cleared so that the local holds the only reference (unless the caller kept
        # the last answer) and CPython extends the string instead of copying it. A
        # caller that reads this after every token (``current_content``) then pays
        # O(new) per call, not O(all).
        pieces = self.pieces
        if self._joined_n < len(pieces):
            joined, self._joined = self._joined, ""
            joined += "".join(pieces[self._joined_n :])
            self._joined, self._joined_n = joined, len(pieces)
        return self._joined

    def add(self, token: int) -> str | None:
        """Decode one token; return the text it adds (also :attr:`delta`), or ``None``."""
        # The hot path: keep it short (a swallowing decoder looks ids up in ()).
        if token >= 0:
            try:
                data = self._lookup[token]
            except IndexError:
                return self._unknown_token(token)
        else:
            return self._unknown_token(token)
        if self._pending:
            data = self._pending + data
            self._pending = b""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = self._decode_damaged(data, token)
            if not text:
                self.delta = None
                return None
        self.pieces.append(text)
        self.delta = text
        out = self._out
        if out.events is not None:
            out.events.append(ContentDelta(text, len(out.tokens) - 1))
        return text

    def flush(self, index: int) -> str:
        """End the message (at token ``index``): the text still to come, ``''`` if none.

        That is one U+FFFD after an unknown id in strict mode, and U+FFFD for
        the bytes of an unfinished character (diagnosed). It is neither added
        to :meth:`text` nor emitted; :meth:`reset` starts the next message.
        """
        tail = REPLACEMENT if self._swallow else ""
        if self._pending:
            tail += self._pending.decode("utf-8", "replace")
            self._out.diagnose(
                Diagnostic(
                    DiagnosticKind.INVALID_UTF8,
                    index,
                    "message ended inside a multi-byte character; replaced by U+FFFD",
                    kept=tail,
                )
            )
        return tail

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
                text += REPLACEMENT
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
            why = "content bytes are not valid UTF-8; replaced by U+FFFD"
            self._diagnose(DiagnosticKind.INVALID_UTF8, why, text, token)
        return text

    def _diagnose(self, kind: DiagnosticKind, why: str, kept: str | None, token: int) -> None:
        """Diagnose the token just added."""
        out = self._out
        out.diagnose(Diagnostic(kind, len(out.tokens) - 1, why, kept=kept, tokens=(token,)))

    def _unknown_token(self, token: int) -> str | None:
        if self._swallow:
            self.delta = None
            return None
        if self._strict:
            # The reference keeps the id pending; nothing after it decodes, and
            # the message ends with one U+FFFD. Reproduced, but not silently.
            self._swallow = True
            self._lookup = ()
            self.delta = None
            why = (
                f"unknown token id {token} in content: the rest of the message is replaced by "
                "one U+FFFD (the reference's behaviour; use strict=False to keep it)"
            )
            self._diagnose(DiagnosticKind.INVALID_TOKEN, why, None, token)
            return None
        data = self._pending + b"\xff"  # never valid: one U+FFFD for the id
        self._pending = b""
        text = data.decode("utf-8", "replace")
        why = f"unknown token id {token} in content: replaced by U+FFFD"
        self._diagnose(DiagnosticKind.INVALID_TOKEN, why, text, token)
        self.pieces.append(text)
        self.delta = text
        self._out.emit(ContentDelta(text, len(self._out.tokens) - 1))
        return text
