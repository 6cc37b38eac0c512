"""Text <-> token ids over o200k_harmony: a thin layer over the BPE engine.

Special tokens are never looked up through the BPE: their ids are constants and
their text is in :mod:`.special_tokens`. Ordinary text goes to the engine's
``encode_ordinary``; decoding uses one precomputed id -> bytes table.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from .._errors import DecodeError, DisallowedSpecialTokenError, InputError
from .auto_engine import BpeEngine
from .registry import get_engine
from .special_tokens import N_ORDINARY, N_VOCAB, SPECIAL_TOKEN_TEXT, SPECIAL_TOKENS
from .vocab_file import ordinary_ranks

#: Every special token's text.
SPECIAL_TOKENS_SET: frozenset[str] = frozenset(SPECIAL_TOKENS)

# All special tokens look like this; used to find candidates quickly before the
# exact membership test (much faster than a 1,091-way alternation).
_SPECIAL_SHAPE = re.compile(r"<\|[A-Za-z0-9_]+\|>")

_DISALLOWED_MESSAGE = (
    "Encountered text corresponding to disallowed special token {tok!r}.\n"
    "If you want this text to be encoded as a special token, pass it to `allowed_special`, "
    "e.g. `allowed_special={{'{tok}', ...}}`.\n"
    "If you want this text to be encoded as normal text, disable the check for this token "
    "by passing `disallowed_special=(enc.special_tokens_set - {{'{tok}'}})`.\n"
    "To disable this check for all special tokens, pass `disallowed_special=()`.\n"
)

SpecialSet = Literal["all"] | AbstractSet[str] | Collection[str]


def _without_surrogates(text: str) -> str:
    # Lone surrogates cannot be UTF-8 encoded; the reference replaces them by
    # U+FFFD before tokenising, and so do we.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Tokenizer:
    """o200k_harmony over a BPE engine. Immutable and safe to share across threads."""

    def __init__(self, engine: BpeEngine) -> None:
        self.engine = engine
        self._table: list[bytes] | None = None
        self._table_lock = threading.Lock()

    # -- encoding ---------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        """BPE ``text`` with no special-token recognition (``""`` -> ``[]``)."""
        if not text:
            return []
        try:
            # Looked up on each call: the auto engine rebinds it when it switches.
            return self.engine.encode_ordinary(text)
        except (UnicodeEncodeError, TypeError):
            # Engines reject lone surrogates (quicktok with a TypeError).
            if not isinstance(text, str):
                raise InputError(f"can only encode str, not {type(text).__name__}") from None
            return self.engine.encode_ordinary(_without_surrogates(text))

    def encode(
        self,
        text: str,
        *,
        allowed_special: SpecialSet = frozenset(),
        disallowed_special: SpecialSet = "all",
    ) -> list[int]:
        """Encode ``text``; special-token text raises unless allowed (as tiktoken)."""
        allowed = SPECIAL_TOKENS_SET if allowed_special == "all" else frozenset(allowed_special)
        if disallowed_special == "all":
            _check_default_disallowed(text, allowed)
        elif disallowed_special:
            _check_disallowed(text, frozenset(disallowed_special) - allowed)
        allowed &= SPECIAL_TOKENS_SET  # other allowed strings are plain text
        if not allowed or "<|" not in text:
            return self.encode_ordinary(text)
        out: list[int] = []
        pos = 0
        for match in _SPECIAL_SHAPE.finditer(text):
            if match.group() in allowed:
                out += self.encode_ordinary(text[pos : match.start()])
                out.append(SPECIAL_TOKENS[match.group()])
                pos = match.end()
        out += self.encode_ordinary(text[pos:])
        return out

    # -- decoding ---------------------------------------------------------------

    @property
    def token_bytes_table(self) -> list[bytes]:
        """id -> bytes for every valid id (built once, on first use)."""
        table = self._table
        if table is None:
            with self._table_lock:
                table = self._table
                if table is None:
                    # Every engine uses these same ranks (the loader proves them official).
                    table = list(ordinary_ranks())
                    table += [SPECIAL_TOKEN_TEXT[i].encode() for i in range(N_ORDINARY, N_VOCAB)]
                    self._table = table
        return table

    def token_bytes(self, token: int) -> bytes | None:
        """The bytes of one token, or ``None`` for an id outside the vocabulary."""
        if 0 <= token < N_VOCAB:
            return self.token_bytes_table[token]
        return None

    def decode_bytes(self, tokens: Iterable[int]) -> bytes:
        """Concatenated bytes of ``tokens``; raises :class:`DecodeError` on an unknown id."""
        table = self.token_bytes_table
        tokens = tokens if isinstance(tokens, Sequence) else list(tokens)
        try:
            if not tokens or min(tokens) >= 0:
                return b"".join([table[t] for t in tokens])
        except (IndexError, TypeError):
            pass
        bad = next(i for i, t in enumerate(tokens) if not (isinstance(t, int) and 0 <= t < N_VOCAB))
        raise DecodeError(f"Invalid token for decoding: {tokens[bad]}", token_index=bad)

    def decode_utf8(self, tokens: Iterable[int]) -> str:
        """Decode to text, strictly: unknown ids and invalid UTF-8 raise :class:`DecodeError`."""
        try:
            data = self.decode_bytes(tokens)
        except DecodeError as exc:
            raise DecodeError(
                f"Could not decode tokens: Invalid token error: {exc}", token_index=exc.token_index
            ) from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"Could not decode tokens: Invalid utf-8 sequence: {_utf8_error_text(exc)}"
            ) from None

    def decode(self, tokens: Iterable[int], errors: str = "replace") -> str:
        """Decode to text, replacing invalid UTF-8 by default."""
        return self.decode_bytes(tokens).decode("utf-8", errors)


def _utf8_error_text(exc: UnicodeDecodeError) -> str:
    # Rust's Utf8Error wording, which the reference exposes.
    if exc.reason == "unexpected end of data" and exc.end == len(exc.object):
        return f"incomplete utf-8 byte sequence from index {exc.start}"
    return f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"


def _raise_disallowed(token: str, position: int) -> None:
    raise DisallowedSpecialTokenError(
        _DISALLOWED_MESSAGE.format(tok=token), token=token, position=position
    )


def _check_default_disallowed(text: str, allowed: frozenset[str]) -> None:
    if "<|" not in text:
        return
    for match in _SPECIAL_SHAPE.finditer(text):
        token = match.group()
        if token in SPECIAL_TOKENS and token not in allowed:
            _raise_disallowed(token, match.start())


_disallowed_patterns: dict[frozenset[str], re.Pattern[str]] = {}


def _check_disallowed(text: str, disallowed: frozenset[str]) -> None:
    if not disallowed:
        return
    pattern = _disallowed_patterns.get(disallowed)
    if pattern is None:
        # Longest first, so that of two candidates at one position the longer wins.
        alternatives = sorted(disallowed, key=len, reverse=True)
        pattern = re.compile("|".join(re.escape(s) for s in alternatives))
        if len(_disallowed_patterns) < 64:
            _disallowed_patterns[disallowed] = pattern
    match = pattern.search(text)
    if match:
        _raise_disallowed(match.group(), match.start())


_tokenizers: dict[str, Tokenizer] = {}
_tokenizers_lock = threading.Lock()


def get_tokenizer(engine_name: str | None = None) -> Tokenizer:
    """The process-wide tokenizer over the named engine (default: see :mod:`.registry`)."""
    engine = get_engine(engine_name)
    tok = _tokenizers.get(engine.name)
    if tok is None:
        with _tokenizers_lock:
            tok = _tokenizers.get(engine.name)
            if tok is None:
                tok = _tokenizers[engine.name] = Tokenizer(engine)
    return tok
