"""Batch parsing's fast path: a clean completion read in a few C-level steps, or not at all.

Most of a completion is content between a few special tokens. Fed token by
token, the streaming parser spends a table lookup, a decode and a few calls on
each; here the ids that steer the parser (``<|start|>``, ``<|message|>`` and the
stop tokens) are found by scanning the completion's ids as bytes, each header
is read by the parser's own cached reader, and each message's content is
decoded with one join and one ``decode``.

:func:`read_clean` handles only completions the streaming parser reads without
a single error, recovery or diagnostic, and returns ``None`` for anything else:
a token where ``<|start|>`` belongs, a header the strict reader refuses or that
a stop token or ``<|start|>`` interrupts, the end of the stream inside a header
(or, in lenient mode or with ``complete=True``, inside content), content that is
not valid UTF-8, an unknown or negative id, a token that is not an ``int``.
The caller then runs the streaming parser from the start, so the fast path's
answers are the streaming parser's by construction: on what it accepts, each
step below is the step the streaming parser's tables take (see
:mod:`.parser`), and everything else is the streaming parser's to decide.
``tests/parse/test_parse_fastpath.py`` and ``tools/fuzz_parse.py`` check it.

Why a whole message's bytes decode to the streaming parser's text: when the
bytes are valid UTF-8, the only error a token boundary can cause in
:class:`~.content.ContentDecoder` is an unfinished character, whose bytes wait
for the next token, so the pieces join to the same text and nothing is
diagnosed.
"""

from __future__ import annotations

import sys
from array import array
from operator import itemgetter
from typing import Final

from .._enums import Role
from .._tokenizer import special_tokens as st
from .header import HeaderError, MessageHeader, glued_role_channel, read_header_tokens

#: The ids the transition tables give cells of their own (besides <|channel|>,
#: which matters only where <|start|> belongs, and there every other id falls back).
_STEERING: Final = frozenset({st.START, st.MESSAGE, *st.STOP_TOKENS})

# The ids as unsigned 32-bit integers, one byte of each kept: bits 16-23. Every
# special id has 3 there (196,608 <= id < 262,144), so a ``find`` of that byte
# (memchr speed) visits the special ids and the few ordinary ids from 196,608
# up, and nothing else.
_TYPECODE: Final = next(code for code in "IL" if array(code).itemsize == 4)
_BITS_16_23: Final = 2 if sys.byteorder == "little" else 1
_SPECIAL_BYTE: Final = bytes([st.FIRST_SPECIAL >> 16])
assert st.FIRST_SPECIAL >> 16 == st.LAST_SPECIAL >> 16  # one byte value for all


def _steering_positions(tokens: list[int]) -> list[int] | None:
    """Positions of the steering ids, or ``None`` for an id outside ``0..2**32-1`` or no int."""
    try:
        # Negative ids fail here too (OverflowError), which matters: table[-1]
        # would be a valid lookup below.
        data = array(_TYPECODE, tokens).tobytes()[_BITS_16_23::4]
    except (TypeError, OverflowError, ValueError):
        return None
    positions: list[int] = []
    find = data.find
    i = find(_SPECIAL_BYTE)
    while i >= 0:
        if tokens[i] in _STEERING:
            positions.append(i)
        i = find(_SPECIAL_BYTE, i + 1)
    return positions


def _decode(table: list[bytes], tokens: list[int]) -> str | None:
    """The text of content tokens, or ``None`` when it needs the streaming parser's repairs."""
    try:
        if len(tokens) > 1:
            data = b"".join(itemgetter(*tokens)(table))  # a tuple of bytes, built in C
        elif tokens:
            data = table[tokens[0]]
        else:
            return ""
        return data.decode()
    except (IndexError, TypeError, UnicodeDecodeError):
        return None


def read_clean(
    table: list[bytes],
    tokens: list[int],
    role: Role | None,
    *,
    strict: bool,
    complete: bool,
) -> list[tuple[MessageHeader, str]] | None:
    """The messages of a completion the streaming parser reads cleanly; ``None`` otherwise.

    ``table`` is the token table, ``role`` the role given for the first message
    (a :class:`Role` or ``None``), ``strict`` and ``complete`` those of
    :func:`~.batch.parse_completion`. A completion it accepts gives no
    diagnostics in either mode.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> table = enc.tokenizer.token_bytes_table
    >>> tokens = enc.encode("<|channel|>final<|message|>Hi<|end|>", allowed_special="all")
    >>> [(h.channel, text) for h, text in read_clean(table, tokens, Role.ASSISTANT,
    ...                                                strict=True, complete=False)]
    [('final', 'Hi')]
    >>> read_clean(table, tokens, None, strict=True, complete=False) is None  # no <|start|>
    True
    """
    marks = _steering_positions(tokens)
    if marks is None:
        return None
    n, n_marks = len(tokens), len(marks)
    out: list[tuple[MessageHeader, str]] = []
    k = 0  # the next mark
    start = 0  # the current header's first token
    if role is None:  # EXPECT_START
        if not n:
            return out
        if tokens[0] != st.START:
            return None  # strict: an error; lenient: junk or a missing <|start|>
        k = start = 1
    while True:
        # HEADER: the next steering token must be <|message|>.
        if k == n_marks:
            return None  # the stream ends inside the header
        end = marks[k]
        if tokens[end] != st.MESSAGE:
            return None  # <|start|> or a stop token inside the header
        try:
            # Lenient mode reads a header the strict reader accepts the same way,
            # without a diagnostic (LenientRecovery.read_header).
            header = read_header_tokens(table, tokens[start:end], role)
        except HeaderError:
            return None
        if not strict and glued_role_channel(header, role):
            return None  # lenient mode reads it as role and channel, with a diagnostic
        role = None
        # CONTENT: up to the next stop token (<|start|>, <|message|> are text here).
        first = end + 1
        k += 1
        while k < n_marks and tokens[marks[k]] not in st.STOP_TOKENS:
            k += 1
        end = marks[k] if k < n_marks else n
        if end == n and (complete or not strict):
            return None  # truncated: an error (complete=True) or a diagnostic (lenient)
        text = _decode(table, tokens[first:end])
        if text is None:
            return None
        out.append((header, text))
        # EXPECT_START: after the stop token, <|start|> or the end of the stream.
        start = end + 1
        if start >= n:
            return out
        if tokens[start] != st.START:
            return None
        k += 2  # past the stop token and this <|start|>
        start += 1
