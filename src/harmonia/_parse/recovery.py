"""Lenient mode's recoveries: the part of the parser that exists only when ``strict=False``.

:class:`LenientRecovery` holds lenient mode's own state (tokens skipped between
messages, and whether the current header was begun without ``<|start|>``) and
decides what a damaged stretch of input becomes. It changes nothing of the
parser's: each method returns :class:`Diagnostic` values and
:class:`RecoveredMessage` values, in order, and the lenient actions of
:mod:`.parser` report them. Lenient mode never raises and never silently loses
text: each recovery makes a :class:`Diagnostic`. The last two kinds below are
made while decoding content (:mod:`.content`).

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
truncated                the stream ended inside a header (read as missing-message)
                         or inside content, before the stop token: the partial
                         message is returned (in strict mode too, without a
                         diagnostic, unless ``complete=True`` makes it an error).
header-repaired          a header the strict reader refuses: extra words,
                         duplicated ``to=``, an unknown role or an author that is
                         no tool name (``assistantfinal`` is read as role and
                         channel run together, also after a given role, where
                         strict mode reads a recipient; the diagnostic keeps the
                         word as written; other junk gets the default role),
                         stray special tokens, an empty channel, gpt-oss-20b's
                         stray ``<|channel|>commentary`` before
                         ``<|channel|>analysis`` (the last channel wins). The
                         dropped words are listed.
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
"""

from __future__ import annotations

from dataclasses import dataclass

from .._enums import Role
from .._names import DiagnosticKind
from .._tokenizer import special_tokens as st
from .events import Diagnostic
from .header import (
    HeaderError,
    MessageHeader,
    glued_role_channel,
    header_as_text,
    is_nonsense,
    parse_header,
    read_header_tokens,
    recover_header,
)


@dataclass(frozen=True, slots=True)
class RecoveredMessage:
    """A message made from a header that never reached ``<|message|>``.

    ``first`` is the index of the header's first token; ``end_index`` and
    ``stop_token`` are those of :class:`~harmonia.MessageDone`.
    """

    header: MessageHeader
    text: str
    first: int
    end_index: int
    stop_token: int | None


Outcome = Diagnostic | RecoveredMessage


class LenientRecovery:
    """Lenient mode's state and decisions (see the module's table)."""

    __slots__ = ("_default_role", "_junk", "_junk_start", "_table", "implicit")

    def __init__(self, table: list[bytes], default_role: Role) -> None:
        self._table = table
        self._default_role = default_role
        self._junk: list[int] = []  # tokens skipped between messages, not yet reported
        self._junk_start = 0
        self.implicit = False
        """Whether the current header was begun without ``<|start|>``."""

    # -- between messages ----------------------------------------------------------------

    def skip(self, token: int, index: int) -> None:
        """Skip a token where ``<|start|>`` belongs (reported by :meth:`flush_junk`)."""
        if not self._junk:
            self._junk_start = index
        self._junk.append(token)

    def flush_junk(self) -> Diagnostic | None:
        """The diagnostic for the tokens skipped since the last call, if any."""
        junk = self._junk
        if not junk:
            return None
        self._junk = []
        text, _ = lossy_text(self._table, junk)
        bad = sum(1 for t in junk if not 0 <= t < len(self._table))
        note = f" ({bad} invalid token id{'s' if bad > 1 else ''})" if bad else ""
        return Diagnostic(
            DiagnosticKind.JUNK_BETWEEN_MESSAGES,
            self._junk_start,
            f"skipped {len(junk)} token{'s' if len(junk) > 1 else ''} outside any message{note}",
            dropped=text,
            tokens=tuple(junk),
        )

    def missing_start(self, token: int, index: int) -> Diagnostic:
        """``<|channel|>`` where ``<|start|>`` belongs: a header begins without it."""
        self.implicit = True
        return Diagnostic(
            DiagnosticKind.MISSING_START,
            index,
            f"<|channel|> without <|start|>: began a {self._default_role.value} message",
            kept=st.SPECIAL_TOKEN_TEXT[token],
            tokens=(token,),
        )

    # -- a header ended by <|message|> -----------------------------------------------------

    def read_header(
        self, tokens: list[int], first: int, role: Role | None
    ) -> tuple[list[Outcome], MessageHeader]:
        """Read the header ``<|message|>`` ended, whatever it holds.

        Returns what to report first (recoveries of header pieces cut short by
        ``<|start|>``, repairs) and the header of the message that follows.
        """
        out: list[Outcome] = []
        try:
            # Whatever strict mode reads sensibly, lenient mode reads the same way.
            header = read_header_tokens(self._table, tokens, role)
            if not is_nonsense(header) and not glued_role_channel(header, role):
                return out, header
        except HeaderError:
            pass
        segments = _split_at_start(tokens, first)
        if len(segments) > 1:
            # ``<|start|>`` inside the header: what precedes it never got its
            # <|message|> (or is the prompt's <|start|>assistant, repeated).
            self._recover_segments(out, segments[:-1], role, None, 0, last_is_message=True)
            role = None
        first, tokens = segments[-1]
        try:
            header = read_header_tokens(self._table, tokens, role)
            if is_nonsense(header):
                raise HeaderError("special-token text in a header field")
            if glued_role_channel(header, role):
                raise HeaderError(f"recipient {header.recipient!r} is a role and a channel")
        except HeaderError as exc:
            header = self._repair_header(out, tokens, first, role, exc.reason)
        return out, header

    def _repair_header(
        self, out: list[Outcome], tokens: list[int], first: int, role: Role | None, reason: str
    ) -> MessageHeader:
        text = self._header_text(out, tokens, first)
        try:
            header = parse_header(text, role)
            if not is_nonsense(header) and not glued_role_channel(header, role):
                return header  # only the bytes were bad
        except HeaderError:
            pass
        header, recovery = recover_header(text, role, self._default_role)
        kept = _describe(header)
        if recovery.glued is not None:
            kept += f" (from {recovery.glued!r})"  # the words as written, kept as text
        out.append(
            Diagnostic(
                DiagnosticKind.HEADER_REPAIRED,
                first,
                f"header {text!r} refused in strict mode ({reason}); "
                + ("; ".join(recovery.notes) or "read leniently"),
                kept=kept,
                dropped=" ".join(recovery.dropped) or None,
                tokens=tuple(tokens),
            )
        )
        return header

    def _header_text(self, out: list[Outcome], tokens: list[int], first: int) -> str:
        """Decode header tokens, replacing bad bytes (diagnosed)."""
        text, bad = lossy_text(self._table, tokens)
        if bad:
            out.append(
                Diagnostic(
                    DiagnosticKind.INVALID_UTF8,
                    first,
                    "header bytes are not valid UTF-8 or include unknown token ids; "
                    "replaced by U+FFFD",
                    kept=text,
                    tokens=tuple(tokens),
                )
            )
        return text

    # -- a header ended by a stop token or the end of the stream ---------------------------

    def header_without_message(
        self,
        tokens: list[int],
        first: int,
        role: Role | None,
        stop_token: int | None,
        end_index: int,
    ) -> list[Outcome]:
        """A header that a stop token (at ``end_index``) or the end of the stream ended.

        ``role`` is the role given for it (the parser's first message), if any.
        """
        out: list[Outcome] = []
        if stop_token is not None and role is not None and not self.implicit:
            # The reference's own strict=False recovery (the first message of a
            # parser given a role): the whole header is the text, <|start|> and
            # all, and the message is kept even without text.
            self._recover_unfinished_header(
                out,
                DiagnosticKind.MISSING_MESSAGE,
                first,
                tokens,
                role,
                end_index,
                stop_token,
                keep_empty=True,
            )
        elif stop_token is not None and not self.implicit:
            # The reference's strict=False drops any other header that a stop
            # token ends before <|message|>. Lenient mode returns the reference's
            # messages wherever the reference returns any, so the header is
            # dropped here too; its text is kept in the diagnostic.
            text = self._header_text(out, tokens, first) if tokens else ""
            ended_by = _ended_by(stop_token)
            out.append(
                Diagnostic(
                    DiagnosticKind.MISSING_MESSAGE,
                    first,
                    f"header ended by {ended_by} without <|message|>: dropped, as the "
                    "reference's strict=False does",
                    dropped=text or None,
                    tokens=tuple(tokens),
                )
            )
        else:
            segments = _split_at_start(tokens, first)
            self._recover_segments(
                out, segments, role, stop_token, end_index, last_is_message=False
            )
        return out

    def _recover_segments(
        self,
        out: list[Outcome],
        segments: list[tuple[int, list[int]]],
        role: Role | None,
        stop_token: int | None,
        end_index: int,
        *,
        last_is_message: bool,
    ) -> None:
        """Recover header pieces that never reached ``<|message|>``, in order.

        Piece ``i + 1`` began at a ``<|start|>``; when ``last_is_message`` the
        last piece is followed by another header, otherwise by ``stop_token``
        at ``end_index`` (``None``: the end of the stream).
        """
        for i, (first, tokens) in enumerate(segments):
            if last_is_message or i + 1 < len(segments):
                kind = DiagnosticKind.MISSING_MESSAGE if tokens else DiagnosticKind.REPEATED_START
                # Ended by the <|start|> after the piece.
                piece_end, stop, ended_by = first + len(tokens), None, _ended_by(st.START)
            else:
                kind = (
                    DiagnosticKind.TRUNCATED
                    if stop_token is None
                    else DiagnosticKind.MISSING_MESSAGE
                )
                piece_end, stop, ended_by = end_index, stop_token, _ended_by(stop_token)
            self._recover_unfinished_header(
                out, kind, first, tokens, role, piece_end, stop, keep_empty=False, ended_by=ended_by
            )
            role = None

    def _recover_unfinished_header(
        self,
        out: list[Outcome],
        kind: DiagnosticKind,
        first: int,
        tokens: list[int],
        role: Role | None,
        end_index: int,
        stop_token: int | None,
        *,
        keep_empty: bool,
        ended_by: str | None = None,
    ) -> None:
        """A header that ended without ``<|message|>``: its words become a message.

        This is the reference's ``strict=False`` rule for a parser's first message
        (``keep_empty``: kept even when it has no text); harmonia applies it to
        every message, keeping the others when they have text, so that no text is
        lost.
        """
        if ended_by is None:
            ended_by = _ended_by(stop_token)
        if not tokens:
            what = (
                "<|start|> repeated at the beginning of a header"
                if kind is DiagnosticKind.REPEATED_START
                else f"empty header ended by {ended_by}"
            )
            out.append(Diagnostic(kind, end_index, f"{what}; nothing to keep"))
            return
        text = self._header_text(out, tokens, first)
        msg_role, name, channel, body, lost = header_as_text(text, role, self._default_role)
        if not body and not keep_empty:
            out.append(
                Diagnostic(
                    kind,
                    first,
                    f"header without <|message|> ended by {ended_by}, and no text: dropped",
                    dropped=text,
                    tokens=tuple(tokens),
                )
            )
            return
        out.append(
            Diagnostic(
                kind,
                first,
                f"header without <|message|> ended by {ended_by}: its words are the text"
                + ("; dropped damaged channel markers" if lost else ""),
                kept=body,
                dropped=" ".join(lost) or None,
                tokens=tuple(tokens),
            )
        )
        out.append(
            RecoveredMessage(
                MessageHeader(msg_role, name, channel), body, first, end_index, stop_token
            )
        )


def _ended_by(stop_token: int | None) -> str:
    if stop_token is None:
        return "the end of the stream"
    return st.SPECIAL_TOKEN_TEXT.get(stop_token, f"token {stop_token}")


def _split_at_start(tokens: list[int], first: int) -> list[tuple[int, list[int]]]:
    """Header tokens split at each ``<|start|>``: (index of the piece's first token, tokens)."""
    segments: list[tuple[int, list[int]]] = []
    begin = 0
    for i, t in enumerate(tokens):
        if t == st.START:
            segments.append((first + begin, tokens[begin:i]))
            begin = i + 1
    segments.append((first + begin, tokens[begin:]))
    return segments


def lossy_text(table: list[bytes], tokens: list[int]) -> tuple[str, bool]:
    """Decode with U+FFFD for bad bytes and unknown ids; also say whether any was bad."""
    bad = not all(0 <= t < len(table) for t in tokens)
    # b"\xff" is never valid UTF-8: one U+FFFD per unknown id.
    data = b"".join([table[t] if 0 <= t < len(table) else b"\xff" for t in tokens])
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
