"""Lenient mode's recoveries: the actions ``strict=False`` puts in the transition table.

:class:`LenientActions` holds the actions of :data:`harmonia._parser.LENIENT`
(``skip_junk``, ``flush_junk``, ``implicit_start``, ``end_header_leniently``,
``header_without_message``) and the header repairs behind them. Lenient mode
never raises and never silently loses text: each recovery appends a
:class:`Diagnostic` to :attr:`StreamableParser.diagnostics`. The last two kinds
below are made while decoding content (:mod:`._parse_content`).

=======================  =========================================================
kind                     situation and recovery
=======================  =========================================================
junk-between-messages    tokens where ``<|start|>`` belongs (text after a stop
                         token, a second stop token as in ``<|end|><|return|>``,
                         ``<|endoftext|>``): skipped up to the next ``<|start|>``;
                         one diagnostic per run, with the dropped text.
missing-start            ``<|channel|>`` where ``<|start|>`` belongs: a message is
                         begun with the parser's role (or assistant), as if
                         ``<|start|>assistant`` had been written.
repeated-start           ``<|start|>`` at the beginning of a header (the completion
                         repeats the prompt's ``<|start|>assistant``, or
                         ``<|start|>`` is doubled): ignored; the header is read
                         from there.
missing-message          a header without ``<|message|>``. The first header of a
                         parser given a role, ended by a stop token, becomes a
                         message whose text is its words, as the reference does
                         for a refusal written without a header (``I must
                         refuse<|end|>``); any other header a stop token ends is
                         dropped, as the reference drops it, with its text in the
                         diagnostic. A header cut short by ``<|start|>`` becomes a
                         message when it has words (the reference fails there).
truncated                the stream ended inside a header: read as missing-message.
                         (A stream ending inside content is not a recovery: the
                         partial message is returned in both modes.)
header-repaired          a header the strict reader refuses or misreads: extra
                         words, duplicated ``to=``, an unknown role, stray special
                         tokens, gpt-oss-20b's stray ``<|channel|>commentary``
                         before ``<|channel|>analysis`` (the last channel wins).
                         The dropped words are listed.
invalid-utf8             bytes that are not UTF-8, in content or header: U+FFFD
                         in the text, raw tokens in the diagnostic.
invalid-token            a token id outside the vocabulary (>= 201089 or < 0):
                         U+FFFD in content (the reference replaces the whole rest
                         of the message; strict mode still does), skipped between
                         messages.
=======================  =========================================================

A ``<|start|>`` inside a header is dealt with when the header ends: if strict
mode can read the header, lenient mode reads it the same way; the first header
of a parser given a role, ended by a stop token, is the reference's own recovery
(the whole header is the text, ``<|start|>`` included).

Layering: :class:`LenientActions` builds on :class:`ContentActions` (a recovered
header becomes a message) and is a base of ``StreamableParser``; this module
imports :mod:`._parse_content`, :mod:`._parse_base` and :mod:`._parse_events`,
never :mod:`._parser`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ._enums import Role
from ._header import (
    HeaderError,
    MessageHeader,
    header_as_text,
    is_nonsense,
    parse_header,
    recover_header,
)
from ._parse_base import header_strict
from ._parse_content import ContentActions
from ._parse_events import (
    ContentDelta,
    Diagnostic,
    MessageDone,
    MessageStarted,
    RecoveryKind,
    make_message,
)
from ._tokenizer import special_tokens as st

_SPECIAL_NAME: Final = {t: st.SPECIAL_TOKEN_TEXT[t] for t in (st.START, st.RETURN, st.END, st.CALL)}


class LenientActions(ContentActions):
    """The recovery actions of :class:`~harmonia.StreamableParser` (a mixin)."""

    __slots__ = ()

    # -- between messages ----------------------------------------------------------------

    def _implicit_start(self, token: int) -> None:
        self._flush_junk(token)
        index = self._index()
        self._diagnose(
            Diagnostic(
                RecoveryKind.MISSING_START,
                index,
                f"<|channel|> without <|start|>: began a {self._default_role.value} message",
                kept="<|channel|>",
                tokens=(token,),
            )
        )
        self._next_role = self._default_role
        self._implicit = True
        self._header_tokens = [token]
        self._header_first = index

    def _skip_junk(self, token: int) -> None:
        if not self._junk:
            self._junk_start = self._index()
        self._junk.append(token)

    def _flush_junk(self, token: int | None) -> None:
        junk = self._junk
        if not junk:
            return
        self._junk = []
        text, _ = _lossy_text(self._table, junk)
        bad = sum(1 for t in junk if not 0 <= t < len(self._table))
        note = f" ({bad} invalid token id{'s' if bad > 1 else ''})" if bad else ""
        self._diagnose(
            Diagnostic(
                RecoveryKind.JUNK_BETWEEN_MESSAGES,
                self._junk_start,
                f"skipped {len(junk)} token{'s' if len(junk) > 1 else ''} "
                f"outside any message{note}",
                dropped=text,
                tokens=tuple(junk),
            )
        )

    # -- header ------------------------------------------------------------------------------

    def _end_header_leniently(self, token: int) -> None:
        role = self._next_role
        self._next_role = None
        try:
            # Whatever strict mode reads sensibly, lenient mode reads the same way.
            header = header_strict(self._table, self._header_tokens, role)
            if not is_nonsense(header):
                self._header_tokens = []
                self._begin_content(header)
                return
        except HeaderError:
            pass
        segments = self._take_header_segments()
        if len(segments) > 1:
            # ``<|start|>`` inside the header: what precedes it never got its
            # <|message|> (or is the prompt's <|start|>assistant, repeated).
            self._recover_segments(segments[:-1], role, token, last_is_message=True)
            role = None
        first, tokens = segments[-1]
        try:
            header = header_strict(self._table, tokens, role)
            if is_nonsense(header):
                raise HeaderError("special-token text in a header field")
        except HeaderError as exc:
            header = self._repair_header(tokens, first, role, exc.reason)
        self._begin_content(header)

    def _take_header_segments(self) -> list[tuple[int, list[int]]]:
        """The header tokens, split at each ``<|start|>``: (index of first token, tokens)."""
        tokens = self._header_tokens
        self._header_tokens = []
        first = self._header_first
        segments: list[tuple[int, list[int]]] = []
        begin = 0
        for i, t in enumerate(tokens):
            if t == st.START:
                segments.append((first + begin, tokens[begin:i]))
                begin = i + 1
        segments.append((first + begin, tokens[begin:]))
        return segments

    def _repair_header(
        self, tokens: list[int], first: int, role: Role | None, reason: str
    ) -> MessageHeader:
        text = self._header_text(tokens, first)
        try:
            header = parse_header(text, role)
            if not is_nonsense(header):
                return header  # only the bytes were bad
        except HeaderError:
            pass
        header, recovery = recover_header(text, role, self._default_role)
        self._diagnose(
            Diagnostic(
                RecoveryKind.HEADER_REPAIRED,
                first,
                f"header {text!r} refused in strict mode ({reason}); "
                + ("; ".join(recovery.notes) or "read leniently"),
                kept=_describe(header),
                dropped=" ".join(recovery.dropped) or None,
                tokens=tuple(tokens),
            )
        )
        return header

    def _header_text(self, tokens: list[int], first: int) -> str:
        """Decode header tokens, replacing bad bytes (diagnosed)."""
        text, bad = _lossy_text(self._table, tokens)
        if bad:
            self._diagnose(
                Diagnostic(
                    RecoveryKind.INVALID_UTF8,
                    first,
                    "header bytes are not valid UTF-8 or include unknown token ids; "
                    "replaced by U+FFFD",
                    kept=text,
                    tokens=tuple(tokens),
                )
            )
        return text

    def _header_without_message(self, token: int | None) -> None:
        role = self._next_role
        self._next_role = None
        if token is not None and role is not None and not self._implicit:
            # The reference's own strict=False recovery (the first message of a
            # parser given a role): the whole header is the text, <|start|> and
            # all, and the message is kept even without text.
            tokens = self._header_tokens
            self._header_tokens = []
            self._recover_unfinished_header(
                RecoveryKind.MISSING_MESSAGE,
                self._header_first,
                tokens,
                role,
                self._index(),
                token,
                keep_empty=True,
            )
            return
        if token is not None and not self._implicit:
            # The reference's strict=False drops any other header that a stop
            # token ends before <|message|>. Lenient mode returns the reference's
            # messages wherever the reference returns any, so the header is
            # dropped here too; its text is kept in the diagnostic.
            self._drop_header(token)
            return
        segments = self._take_header_segments()
        self._recover_segments(segments, role, token, last_is_message=False)
        if token is None:
            self._flush_junk(None)

    def _drop_header(self, token: int) -> None:
        tokens = self._header_tokens
        self._header_tokens = []
        first = self._header_first
        text = self._header_text(tokens, first) if tokens else ""
        ended_by = _SPECIAL_NAME.get(token, f"token {token}")
        self._diagnose(
            Diagnostic(
                RecoveryKind.MISSING_MESSAGE,
                first,
                f"header ended by {ended_by} without <|message|>: dropped, as the "
                "reference's strict=False does",
                dropped=text or None,
                tokens=tuple(tokens),
            )
        )

    def _recover_segments(
        self,
        segments: list[tuple[int, list[int]]],
        role: Role | None,
        token: int | None,
        *,
        last_is_message: bool,
    ) -> None:
        """Recover header pieces that never reached ``<|message|>``, in order.

        Piece ``i + 1`` began at a ``<|start|>``; when ``last_is_message`` the
        last piece is followed by another header, otherwise by ``token`` (a stop
        token, or ``None`` at the end of the stream).
        """
        index = len(self._tokens) if token is None else self._index()
        for i, (first, tokens) in enumerate(segments):
            follows_start = last_is_message or i + 1 < len(segments)
            if follows_start:
                kind = RecoveryKind.REPEATED_START if not tokens else RecoveryKind.MISSING_MESSAGE
                end_index = first + len(tokens)  # the <|start|> after the piece
                stop: int | None = None
            else:
                kind = RecoveryKind.TRUNCATED if token is None else RecoveryKind.MISSING_MESSAGE
                end_index = index
                stop = token
            self._recover_unfinished_header(
                kind, first, tokens, role, end_index, stop, keep_empty=False
            )
            role = None

    def _recover_unfinished_header(
        self,
        kind: RecoveryKind,
        first: int,
        tokens: list[int],
        role: Role | None,
        end_index: int,
        stop_token: int | None,
        *,
        keep_empty: bool,
    ) -> None:
        """A header that ended without ``<|message|>``: its words become a message.

        This is the reference's ``strict=False`` rule for a parser's first message
        (``keep_empty``: kept even when it has no text); harmonia applies it to
        every message, keeping the others when they have text, so that no text is
        lost.
        """
        if end_index >= len(self._tokens):
            ended_by = "the end of the stream"
        else:
            ended_by = _SPECIAL_NAME.get(
                self._tokens[end_index], f"token {self._tokens[end_index]}"
            )
        if not tokens:
            what = (
                "<|start|> repeated at the beginning of a header"
                if kind is RecoveryKind.REPEATED_START
                else f"empty header ended by {ended_by}"
            )
            self._diagnose(Diagnostic(kind, end_index, f"{what}; nothing to keep"))
            return
        text = self._header_text(tokens, first)
        msg_role, name, channel, body = header_as_text(text, role, self._default_role)
        if not body and not keep_empty:
            self._diagnose(
                Diagnostic(
                    kind,
                    first,
                    f"header without <|message|> ended by {ended_by}, and no text: dropped",
                    dropped=text,
                    tokens=tuple(tokens),
                )
            )
            return
        self._diagnose(
            Diagnostic(
                kind,
                first,
                f"header without <|message|> ended by {ended_by}: its words are the text",
                kept=body,
                tokens=tuple(tokens),
            )
        )
        header = MessageHeader(msg_role, name, channel)
        self._emit(MessageStarted(header, first))
        if body:
            self._emit(ContentDelta(body, first))
        self._messages.append((header, body))
        if self._events is not None:
            self._emit(MessageDone(make_message(header, body), end_index, stop_token))


def _lossy_text(table: list[bytes], tokens: Iterable[int]) -> tuple[str, bool]:
    """Decode with U+FFFD for bad bytes and unknown ids; also say whether any was bad."""
    parts: list[bytes] = []
    bad = False
    for t in tokens:
        if 0 <= t < len(table):
            parts.append(table[t])
        else:
            parts.append(b"\xff")  # never valid UTF-8: one U+FFFD
            bad = True
    data = b"".join(parts)
    try:
        return data.decode(), bad
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), True


def _describe(header: MessageHeader) -> str:
    fields = [f"role={header.role.value}"]
    for name in ("name", "channel", "recipient", "content_type"):
        value = getattr(header, name)
        if value is not None:
            fields.append(f"{name}={value!r}")
    return " ".join(fields)
