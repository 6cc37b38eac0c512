"""JSON object keys that every JSON parser reads the same way: no escapes, no repeats.

llguidance checks a JSON value against its schema as text: a declared key is
matched by its spelling, and any other key (open ``additionalProperties``,
``patternProperties``) by a pattern that excludes the declared spellings only.
So ``{"city": "Tokyo", "\\u0063ity": 42}`` passes, and ``json.loads`` reads it
as ``{"city": 42}``; and ``{"a": 1, "a": 2}`` passes ``minProperties: 2``
though it parses to one property. No grammar can forbid repeated keys, so
harmonia follows the JSON content of the turn itself and adds one rule on top of
llguidance's: **a key is written without escape sequences, and at most once per
object**. Written that way, the keys a parser reads are the keys the schema
checked, whichever parser reads them.

:class:`KeyGuard` tracks where the turn is (header, content, inside a key) from
the consumed tokens. :meth:`KeyGuard.permits` answers for one token exactly;
:meth:`KeyGuard.restrict` clears mask bits cheaply and a little more broadly (a
token with a backslash right after a quote, or one that spells a used key
between two quotes, is cleared even where it would be harmless; a shorter token
always remains, so no turn is cut short by it).

Which messages hold JSON is read off the grammar's last line,
``// harmonia-json-content: final functions.f ...`` (written by
:func:`~harmonia.constrained.build_turn_grammar`): ``final`` for a structured
final answer, and the recipients whose arguments are JSON. A grammar without it
gets no key rule.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from .._enums import Role
from .._names import ASSISTANT, FINAL
from .._parse.header import recover_header
from .._tokenizer import special_tokens as st
from .._turn import classify

#: The grammar's marker line (see the module docstring).
JSON_CONTENT_MARKER: Final = "// harmonia-json-content:"
#: The marker's word for a structured final answer (recipients always hold a dot).
FINAL_WORD: Final = FINAL

_MARKER_LINE: Final = re.compile(r"^// harmonia-json-content:(.*)$", re.MULTILINE)
_QUOTE: Final = 0x22
_BACKSLASH: Final = 0x5C
_HEADER, _CONTENT, _BETWEEN = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _Tables:
    """What the masks need about the vocabulary, computed once."""

    keep_no_backslash: NDArray[np.int32]  # mask words: tokens without a backslash
    keep_no_quote_backslash: NDArray[np.int32]  # ... without a backslash after a quote
    by_inner: dict[bytes, NDArray[np.int64]]  # "x" inside a token -> those tokens
    quoted: list[bytes]  # tokens holding a quote, sorted (for prefix searches)
    quoted_ids: NDArray[np.int64]


_tables: _Tables | None = None
_lock = threading.Lock()


def _keep_words(ids: Sequence[int], words: int) -> NDArray[np.int32]:
    bits = np.ones(words * 32, dtype=np.bool_)
    bits[list(ids)] = False
    return np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)


def tables(token_bytes: Sequence[bytes], words: int, first_special: int) -> _Tables:
    """The vocabulary tables (built once per process, on first use: about 0.1 s)."""
    global _tables
    with _lock:
        if _tables is None:
            backslash: list[int] = []
            quote_backslash: list[int] = []
            inner: dict[bytes, list[int]] = {}
            quoted: list[tuple[bytes, int]] = []
            for token, data in enumerate(token_bytes[:first_special]):
                if b"\\" in data:
                    backslash.append(token)
                    first = data.find(b'"')
                    if first >= 0 and b"\\" in data[first:]:
                        quote_backslash.append(token)
                if b'"' in data:
                    quoted.append((data, token))
                    parts = data.split(b'"')
                    for part in parts[1:-1]:  # between two consecutive quotes
                        inner.setdefault(part, []).append(token)
            quoted.sort()
            _tables = _Tables(
                _keep_words(backslash, words),
                _keep_words(quote_backslash, words),
                {k: np.array(v, dtype=np.int64) for k, v in inner.items()},
                [data for data, _ in quoted],
                np.array([token for _, token in quoted], dtype=np.int64),
            )
        return _tables


def _bit(words: NDArray[np.int32], token: int) -> bool:
    return bool((int(words[token >> 5]) >> (token & 31)) & 1)


def _clear(out: NDArray[np.int32], ids: NDArray[np.int64]) -> None:
    if ids.size:
        np.bitwise_and.at(out, ids >> 5, ~(np.int32(1) << (ids & 31).astype(np.int32)))


class KeyGuard:
    """Follows a turn's JSON content and enforces: keys unescaped, each once per object."""

    __slots__ = (
        "_escape",
        "_expect_key",
        "_in_key",
        "_in_string",
        "_key",
        "_mode",
        "_stack",
        "final_json",
        "header",
        "in_json",
        "recipients",
        "tables",
        "token_bytes",
    )

    def __init__(
        self,
        recipients: frozenset[str],
        final_json: bool,
        token_bytes: Sequence[bytes],
        tables: _Tables,
    ) -> None:
        self.recipients = recipients
        self.final_json = final_json
        self.token_bytes = token_bytes
        self.tables = tables
        self._mode = _HEADER  # the turn starts after the prompt's <|start|>assistant
        self.header = bytearray()
        self.in_json = False
        self._reset_json()

    @staticmethod
    def marker(recipients: Sequence[str], final_json: bool) -> str:
        """The grammar's marker line for these JSON messages."""
        words = ([FINAL_WORD] if final_json else []) + list(recipients)
        return f"{JSON_CONTENT_MARKER} {' '.join(words)}".rstrip()

    @staticmethod
    def declared(grammar: str) -> tuple[frozenset[str], bool] | None:
        """(JSON recipients, final answer is JSON) from ``grammar``'s marker, if any."""
        found = _MARKER_LINE.findall(grammar)
        if not found:
            return None
        words = found[-1].split()
        return frozenset(w for w in words if w != FINAL_WORD), FINAL_WORD in words

    def _reset_json(self) -> None:
        self._stack: list[set[bytes] | None] = []  # a set of keys per object, None per array
        self._expect_key = False
        self._in_string = False
        self._in_key = False
        self._escape = False
        self._key = bytearray()

    def copy(self) -> KeyGuard:
        twin = KeyGuard(self.recipients, self.final_json, self.token_bytes, self.tables)
        twin._mode, twin.header, twin.in_json = self._mode, bytearray(self.header), self.in_json
        twin._stack = [None if keys is None else set(keys) for keys in self._stack]
        twin._expect_key, twin._in_string = self._expect_key, self._in_string
        twin._in_key, twin._escape, twin._key = self._in_key, self._escape, bytearray(self._key)
        return twin

    # -- following the turn ------------------------------------------------------------

    def feed(self, token: int) -> None:
        """Advance past ``token`` (one the matcher accepted)."""
        if token >= st.FIRST_SPECIAL:
            self._special(token)
        elif self._mode == _HEADER:
            self.header += self.token_bytes[token]
        elif self._mode == _CONTENT and self.in_json:
            self._scan(self.token_bytes[token])

    def _special(self, token: int) -> None:
        if token == st.START:
            self._mode, self.header = _HEADER, bytearray()
        elif token == st.MESSAGE:
            self._mode = _CONTENT
            self.in_json = self._holds_json(bytes(self.header))
            self._reset_json()
        elif token in st.STOP_TOKENS:  # <|end|>, <|call|>, <|return|>
            self._mode, self.in_json = _BETWEEN, False
        elif self._mode == _HEADER:  # <|channel|>, <|constrain|>
            self.header += st.SPECIAL_TOKEN_TEXT[token].encode()

    def _holds_json(self, header: bytes) -> bool:
        """Whether the message with this header holds JSON, read as the stream reads it."""
        text = header.decode("utf-8", "replace").removeprefix(ASSISTANT)
        fields, _ = recover_header(text, Role.ASSISTANT, Role.ASSISTANT)
        reading = classify(Role.ASSISTANT, fields.channel, fields.recipient, fields.content_type)
        if reading.kind == "call":
            return reading.recipient in self.recipients
        return self.final_json and reading.kind == "text" and reading.channel == FINAL

    def _scan(self, data: bytes) -> bool:
        """Move over ``data``; False (state then unusable) if it breaks the key rule."""
        for byte in data:
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif byte == _BACKSLASH:
                    if self._in_key:
                        return False
                    self._escape = True
                elif byte == _QUOTE:
                    self._in_string = False
                    if self._in_key:
                        self._in_key = False
                        keys = self._stack[-1]
                        key = bytes(self._key)
                        if keys is None or key in keys:
                            return False
                        keys.add(key)
                elif self._in_key:
                    self._key.append(byte)
            elif byte == _QUOTE:
                self._in_string = True
                self._in_key = self._expect_key
                self._expect_key = False
                self._key.clear()
            elif byte == 0x7B:  # {
                self._stack.append(set())
                self._expect_key = True
            elif byte == 0x5B:  # [
                self._stack.append(None)
            elif byte in (0x7D, 0x5D):  # } ]
                if self._stack:
                    self._stack.pop()
                self._expect_key = False
            elif byte == 0x2C:  # ,
                self._expect_key = bool(self._stack) and self._stack[-1] is not None
        return True

    # -- what may come next --------------------------------------------------------------

    def permits(self, token: int) -> bool:
        """Whether ``token`` keeps every key unescaped and unrepeated (exact)."""
        if token >= st.FIRST_SPECIAL or self._mode != _CONTENT or not self.in_json:
            return True
        data = self.token_bytes[token]
        if b'"' not in data and b"\\" not in data:
            return True  # only a quote ends a key, only a backslash escapes
        return self.copy()._scan(data)

    def restrict(self, out: NDArray[np.int32]) -> None:
        """Clear from ``out`` tokens that would escape or repeat a key (a superset)."""
        if self._mode != _CONTENT or not self.in_json:
            return
        t = self.tables
        if self._in_key:
            np.bitwise_and(out, t.keep_no_backslash, out=out)
            for ending in self._key_endings():
                self._clear_prefixed(out, ending)
            return
        keep = t.keep_no_quote_backslash if self._in_string else t.keep_no_backslash
        np.bitwise_and(out, keep, out=out)
        for used in self._stack:
            for key in used or ():
                ids = t.by_inner.get(key)
                if ids is not None:
                    _clear(out, ids)

    def restricts(self, token: int) -> bool:
        """Whether :meth:`restrict` clears ``token``'s bit (the same rule, one token):
        what ``TurnMatcher.allows`` answers agrees with the mask on every token."""
        if token >= st.FIRST_SPECIAL or self._mode != _CONTENT or not self.in_json:
            return False
        data = self.token_bytes[token]
        if b'"' not in data and b"\\" not in data:
            return False  # every table below holds only tokens with one of them
        t = self.tables
        if self._in_key:
            if not _bit(t.keep_no_backslash, token):
                return True
            return any(data.startswith(ending) for ending in self._key_endings())
        keep = t.keep_no_quote_backslash if self._in_string else t.keep_no_backslash
        if not _bit(keep, token):
            return True
        inner = data.split(b'"')[1:-1]  # the spellings by_inner files this token under
        return any(key in inner for used in self._stack for key in used or ())

    def _key_endings(self) -> list[bytes]:
        """What, written next, would end the key being typed as one its object already has."""
        typed = bytes(self._key)
        return [key[len(typed) :] + b'"' for key in self._stack[-1] or () if key.startswith(typed)]

    def _clear_prefixed(self, out: NDArray[np.int32], prefix: bytes) -> None:
        """Clear every token whose bytes start with ``prefix`` (which holds a quote)."""
        t = self.tables
        start = bisect.bisect_left(t.quoted, prefix)
        stop = start
        while stop < len(t.quoted) and t.quoted[stop].startswith(prefix):
            stop += 1
        _clear(out, t.quoted_ids[start:stop])
