"""A pure-Python o200k_base encoder that is ready in a tenth of a second.

Why it exists: quicktok encodes fastest, but building its tables takes about half
a second of CPU with the GIL held, longer than the reference library takes to
load. This encoder needs only the ranks and a Unicode class table (quicktok's,
corrected to the reference's Unicode 16.0 by :mod:`.vocab_file`), so harmonia can
load fast and still encode exactly; the ``auto`` engine (:mod:`.auto_engine`) hands heavy
workloads over to quicktok later.

How it splits text: o200k's pre-tokenisation pattern only asks five questions
of a character (letter? number? whitespace? "upper-ish"? "lower-ish"?). Every
non-ASCII character is therefore replaced by one of 32 private-use stand-ins that
answers those questions the same way (``str.translate``, cached per character),
and a stdlib ``re`` pattern written over ASCII plus the stand-ins does the split.
The stand-ins keep every index, so the pieces are cut from the original text.
One letter maps to an ASCII letter instead: long s, which the reference's
case-insensitive contractions treat as ``s`` (``'ſ`` is ``'s``).
Each piece is then merged by the usual BPE rule: repeatedly join the adjacent pair
whose concatenation has the lowest rank, leftmost first.

Long pieces: a heap merge is n log n but still about ten microseconds a byte in
Python, so a megabyte of spaces would take seconds. Long runs of one short unit
(spaces, newlines, ``aaaa``, ``\r\n\r\n``), the usual pathological input, are
*tiled*: BPE turns such a run into one token repeated and a different tail, so
the token is learnt once per unit from a sample and only the last couple of
kilobytes are merged (the tests check this against quicktok for many units and
lengths). Other long pieces go to ``long_piece_delegate`` when one is set (the
tiered engine hands them to quicktok) and to the heap merge otherwise.
"""

from __future__ import annotations

import heapq
import re
import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import chain, pairwise

from .._errors import InputTypeError, VocabularyError

#: Bits of a character's class signature, in the order of quicktok's table.
LETTER, NUMBER, SPACE, UPPER, LOWER = 1, 2, 4, 8, 16
CLASS_BITS = (LETTER, NUMBER, SPACE, UPPER, LOWER)

#: Stand-in for a non-ASCII character with signature ``s`` is ``chr(_STAND_IN + s)``.
_STAND_IN = 0xE000

#: Pieces up to this many bytes merge with the simple quadratic loop (in C-level
#: list operations); longer ones with a heap, so one long run stays n log n.
_SHORT_PIECE = 128
#: Pieces longer than this are not cached: they rarely repeat.
_CACHEABLE_PIECE = 64
#: The piece cache is cleared when it reaches this many entries.
_PIECE_CACHE_LIMIT = 65_536
#: Pieces of at least this many bytes that repeat a unit of up to _MAX_UNIT
#: characters are tiled; the last _TILE_WINDOW bytes or so are merged exactly
#: (many times the longest o200k token, 128 bytes, so the tail settles as in the
#: full merge).
_TILE_MIN = 4096
_MAX_UNIT = 4
_TILE_WINDOW = 2048
#: Non-periodic pieces of at least this many bytes go to ``long_piece_delegate``.
_DELEGATE_PIECE = 16_384

Ranges = Sequence[tuple[int, int]]


class UnicodeClasses:
    """Which of the five classes each code point is in, as sorted inclusive ranges."""

    def __init__(self, ranges: Sequence[Ranges]) -> None:
        if len(ranges) != len(CLASS_BITS):
            raise VocabularyError(f"expected {len(CLASS_BITS)} classes, got {len(ranges)}")
        self._ranges = [list(rs) for rs in ranges]
        self._starts = [[lo for lo, _ in rs] for rs in ranges]
        self._ends = [[hi for _, hi in rs] for rs in ranges]

    def ranges(self, bit: int) -> list[tuple[int, int]]:
        """One class's members as sorted, disjoint, inclusive ranges."""
        return list(self._ranges[CLASS_BITS.index(bit)])

    def with_overrides(self, overrides: Sequence[tuple[int, int, int]]) -> UnicodeClasses:
        """A copy where each ``(first, last, signature)`` range has that signature."""
        classes = []
        for bit, ranges in zip(CLASS_BITS, self._ranges, strict=True):
            kept = _subtract(ranges, [(lo, hi) for lo, hi, _ in overrides])
            added = [(lo, hi) for lo, hi, sig in overrides if sig & bit]
            classes.append(_merge(sorted(kept + added)))
        return UnicodeClasses(classes)

    def signature(self, code_point: int) -> int:
        sig = 0
        for bit, starts, ends in zip(CLASS_BITS, self._starts, self._ends, strict=True):
            i = bisect_right(starts, code_point) - 1
            if i >= 0 and code_point <= ends[i]:
                sig |= bit
        return sig

    def members(self, bit: int) -> str:
        """The pattern alphabet's members of one class: ASCII ones and stand-ins."""
        ascii_members = [chr(c) for c in range(128) if self.signature(c) & bit]
        stand_ins = [chr(_STAND_IN + s) for s in range(32) if s & bit]
        return "".join(ascii_members + stand_ins)


def _subtract(ranges: Ranges, holes: Ranges) -> list[tuple[int, int]]:
    """``ranges`` without the code points of ``holes`` (both sorted and disjoint)."""
    out = []
    first = 0  # holes before this index end before the current range
    for lo, hi in ranges:
        while first < len(holes) and holes[first][1] < lo:
            first += 1
        k = first
        while k < len(holes) and holes[k][0] <= hi:
            if holes[k][0] > lo:
                out.append((lo, holes[k][0] - 1))
            lo = max(lo, holes[k][1] + 1)
            k += 1
        if lo <= hi:
            out.append((lo, hi))
    return out


def _merge(ranges: Ranges) -> list[tuple[int, int]]:
    """Sorted ranges with touching or overlapping neighbours joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _charset(chars: str, negate: bool = False) -> str:
    body = "".join(f"\\u{ord(c):04x}" for c in chars)
    return f"[{'^' if negate else ''}{body}]"


def split_pattern(classes: UnicodeClasses) -> re.Pattern[str]:
    """o200k_base's pattern, over ASCII and the stand-ins, for stdlib ``re``."""
    letter, number = classes.members(LETTER), classes.members(NUMBER)
    space = classes.members(SPACE)
    upper, lower = _charset(classes.members(UPPER)), _charset(classes.members(LOWER))
    prefix = _charset("\r\n" + letter + number, negate=True)
    contraction = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    ws, not_ws = _charset(space), _charset(space, negate=True)
    alternatives = [
        f"{prefix}?{upper}*{lower}+{contraction}",
        f"{prefix}?{upper}+{lower}*{contraction}",
        f"{_charset(number)}{{1,3}}",
        f" ?{_charset(space + letter + number, negate=True)}+[\\r\\n/]*",
        f"{ws}*[\\r\\n]+",
        f"{ws}+(?!{not_ws})",
        f"{ws}+",
    ]
    return re.compile("|".join(alternatives))


#: Non-ASCII letters that o200k's case-insensitive contractions (``'s``, ``'ll``, ...)
#: match, as the reference's regex engine folds case: the long s is an ``s``.
#: They keep their classes when translated to the ASCII letter.
CASE_FOLDS_TO_ASCII = {0x17F: ord("s")}


class _StandIns(dict[int, int]):
    """``str.translate`` table: ASCII to itself, anything else to its stand-in."""

    def __init__(self, classes: UnicodeClasses) -> None:
        super().__init__((c, c) for c in range(128))
        self.update(CASE_FOLDS_TO_ASCII)
        self._classes = classes

    def __missing__(self, code_point: int) -> int:
        stand_in = _STAND_IN + self._classes.signature(code_point)
        self[code_point] = stand_in
        return stand_in


class PythonBpe:
    """o200k_base ordinary-text encoder in pure Python. Thread-safe.

    ``ranks[i]`` is the bytes of rank ``i``; ``classes`` is quicktok's class table.
    """

    name = "python"

    def __init__(self, ranks: Sequence[bytes], classes: UnicodeClasses) -> None:
        self._tokens = ranks
        self._ranks: dict[bytes, int] = dict(zip(ranks, range(len(ranks)), strict=True))
        self._findall = split_pattern(classes).findall
        self._stand_ins = _StandIns(classes)
        # The cache maps a piece of text to its ids; the lock only guards clearing.
        self._cache: dict[str, tuple[int, ...]] = {}
        self._cache_lock = threading.Lock()
        # unit -> (the rank a long run of it repeats, that token's length in characters),
        # or None when runs of the unit do not tile.
        self._tiles: dict[str, tuple[int, int] | None] = {}
        #: Encodes a long piece that does not tile faster than the heap merge, or
        #: returns None to decline; set by the tiered engine.
        self.long_piece_delegate: Callable[[str], list[int] | None] | None = None

    def token_bytes(self, rank: int) -> bytes:
        return self._tokens[rank]

    def split(self, text: str) -> list[str]:
        """The pre-tokenisation pieces of ``text`` (they always cover it)."""
        if text.isascii():
            return self._findall(text)
        pieces: list[str] = []
        start = 0
        for stand_in_piece in self._findall(text.translate(self._stand_ins)):
            end = start + len(stand_in_piece)
            pieces.append(text[start:end])
            start = end
        return pieces

    def encode_ordinary(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise InputTypeError(f"can only encode str, not {type(text).__name__}")
        return self.encode_pieces(self.split(text))

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """The ids of consecutive pieces of :meth:`split` (a text's, or a run of them).

        The pattern has no look-behind, so the pieces that follow any piece
        boundary are those of the text from there on: a text can be encoded
        piecewise, in parts, or its rest handed to another engine.
        """
        found = list(map(self._cache.get, pieces))
        if None in found:
            for i, ids in enumerate(found):
                if ids is None:
                    found[i] = self._encode_piece(pieces[i])
        return list(chain.from_iterable(found))  # type: ignore[arg-type]

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        data = piece.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError here
        rank = self._ranks.get(data)
        if rank is not None:
            ids: tuple[int, ...] = (rank,)
        elif len(data) <= _SHORT_PIECE:
            ids = merge_short(data, self._ranks)
        else:
            ids = self._encode_long(piece, data)
        if len(piece) <= _CACHEABLE_PIECE:
            cache = self._cache
            if len(cache) >= _PIECE_CACHE_LIMIT:
                with self._cache_lock:
                    cache.clear()
            cache[piece] = ids
        return ids

    def _encode_long(self, piece: str, data: bytes) -> tuple[int, ...]:
        if len(data) >= _TILE_MIN:
            tiled = self._tiled(piece)
            if tiled is not None:
                return tiled
        delegate = self.long_piece_delegate
        if delegate is not None and len(data) >= _DELEGATE_PIECE:
            ids = delegate(piece)
            if ids is not None:
                return tuple(ids)
        return merge_long(data, self._ranks)

    def _tiled(self, piece: str) -> tuple[int, ...] | None:
        """The ids of a piece that repeats a short unit, or None if it does not."""
        # A string has period k exactly when it equals itself shifted by k.
        unit_chars = next((k for k in range(1, _MAX_UNIT + 1) if piece[k:] == piece[:-k]), None)
        if unit_chars is None:
            return None
        unit = piece[:unit_chars]
        if unit not in self._tiles:
            self._tiles[unit] = self._learn_tile(unit)
        tile = self._tiles[unit]
        if tile is None:
            return None
        rank, tile_chars = tile
        unit_bytes = len(unit.encode("utf-8"))
        keep = -(-_TILE_WINDOW // unit_bytes) * unit_chars  # whole units, >= the window
        repeats = (len(piece) - keep) // tile_chars
        if repeats <= 0:
            return None
        rest = piece[repeats * tile_chars :]
        return (rank,) * repeats + merge_long(rest.encode("utf-8"), self._ranks)

    def _learn_tile(self, unit: str) -> tuple[int, int] | None:
        """Merge a sample run of ``unit``: the token its first half repeats, if any."""
        unit_bytes = len(unit.encode("utf-8"))
        sample = unit * -(-2 * _TILE_WINDOW // unit_bytes)
        ids = merge_long(sample.encode("utf-8"), self._ranks)
        first = ids[0]
        token = self._tokens[first]
        if len(token) % unit_bytes or any(rank != first for rank in ids[: len(ids) // 2]):
            return None  # not one token repeated: merge such runs in full
        return first, len(token) // unit_bytes * len(unit)


_NO_RANK = 1 << 62  # larger than any rank: "this pair does not merge"


def merge_short(data: bytes, ranks: dict[bytes, int]) -> tuple[int, ...]:
    """BPE-merge one piece: lowest-rank adjacent pair first, leftmost on ties."""
    get = ranks.get
    parts = [data[i : i + 1] for i in range(len(data))]
    pair_ranks = [get(a + b, _NO_RANK) for a, b in pairwise(parts)]
    while pair_ranks:
        best = min(pair_ranks)
        if best == _NO_RANK:
            break
        i = pair_ranks.index(best)  # leftmost of the lowest
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        del pair_ranks[i]
        if i > 0:
            pair_ranks[i - 1] = get(parts[i - 1] + parts[i], _NO_RANK)
        if i < len(pair_ranks):
            pair_ranks[i] = get(parts[i] + parts[i + 1], _NO_RANK)
    return tuple([ranks[p] for p in parts])


def merge_long(data: bytes, ranks: dict[bytes, int]) -> tuple[int, ...]:
    """The same merge order as :func:`merge_short`, in O(n log n).

    Parts are a linked list over byte offsets (a part runs from its offset to
    ``nxt[offset]``); the heap holds candidate pairs as (rank, left, middle,
    right) offsets, and a popped pair is stale unless both parts are unchanged.
    Ties on rank pop the lowest ``left`` first, which is the leftmost pair.
    """
    get = ranks.get
    n = len(data)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    heap = [(r, i, i + 1, i + 2) for i in range(n - 1) if (r := get(data[i : i + 2])) is not None]
    heapq.heapify(heap)
    while heap:
        _, left, mid, right = heapq.heappop(heap)
        if nxt[left] != mid or mid >= n or nxt[mid] != right or prv[mid] != left:
            continue
        nxt[left] = right  # ``mid`` is merged into ``left``
        prv[mid] = -2  # marks a dead offset: no live pair names it as its middle
        if right < n:
            prv[right] = left
            after = nxt[right]
            if (r := get(data[left:after])) is not None:
                heapq.heappush(heap, (r, left, right, after))
        before = prv[left]
        if before >= 0 and (r := get(data[before:right])) is not None:
            heapq.heappush(heap, (r, before, left, right))
    ids = []
    start = 0
    while start < n:
        end = nxt[start]
        ids.append(ranks[data[start:end]])
        start = end
    return tuple(ids)
