"""GBNF for what a JSON schema says about one scalar: integer and number ranges, string
formats, and ``pattern`` regular expressions.

Written for :mod:`._json_gbnf`. Every rule here is *sound*: whatever it accepts is
valid for the keyword (a few valid spellings are left out, as said per rule), so a
grammar built from them never lets the model write something the schema refuses.

* **Integer ranges** are written digit by digit: ``[low, high]`` becomes
  alternatives of numbers of one length each, and each of those a digit class
  followed by a shorter range (``17..342`` is ``1[7-9] | [2-9][0-9] |
  [1-2][0-9][0-9] | 3[0-3][0-9] | 34[0-2]``). No leading zeros, no ``-0``.
* **Number ranges** with bounds that are whole numbers: the integer part is such a
  range and the fraction is free, except at the bounds (``x <= 5`` allows ``5`` and
  ``5.000`` but not ``5.1``; ``x > 2`` allows ``2.01`` but not ``2.0``). A bounded
  number is written without an exponent.
* **Formats** ``date`` (the days each month has, 29 February in leap years only),
  ``time`` and ``date-time`` (RFC 3339: seconds 00-59, an optional fraction, ``Z``
  or an offset), ``uuid`` (8-4-4-4-12 hex digits) and ``email`` (a simple
  ``local@domain.tld``: letters, digits and ``._%+-``).
* **Patterns**: anchored ``^...$``, with literals, ``.``, classes (``[a-z]``,
  ``[^,]``, ``\\d``, ``\\w``, ``\\s`` as a space), groups (``(...)``, ``(?:...)``),
  alternatives inside groups, and ``* + ? {m} {m,} {m,n}``. The characters a JSON
  string would have to escape (``"``, ``\\``, control characters) and ``|`` (which
  keeps ``<|`` and so the special tokens' text out of a string) are written by a
  class or ``.`` never; as a literal, in their JSON escape (``\\u007c`` for ``|``).
  Refused: a pattern not anchored at both ends, a top-level ``|`` (``^a|b$`` anchors
  only one side each), anchors or ``\\b`` inside, back-references, look-arounds,
  flags, ``\\D``/``\\W``/``\\S``, possessive quantifiers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Final

_DIGITS: Final = "[0-9]"
#: Characters a class or "." may write raw in a JSON string: no '"', '\\', '|', controls.
_FORBIDDEN: Final = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7C, 0x7C))
_MAX_CHAR: Final = 0x10FFFF
#: The keywords that bound a number.
BOUND_KEYS: Final = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")


class Unsupported(ValueError):
    """What a keyword asks cannot be written as GBNF here (the message says why)."""


def group(alternatives: list[str]) -> str:
    """Alternatives as one item, safe to write inside a sequence."""
    return alternatives[0] if len(alternatives) == 1 else "( " + " | ".join(alternatives) + " )"


def _same_length(low: str, high: str) -> list[str]:
    """Alternatives for the digit strings of one length from ``low`` to ``high``."""
    if not low:
        return []
    if low == high:
        return [f'"{low}"']
    if low[0] == high[0]:
        return [f'"{low[0]}" {group(_same_length(low[1:], high[1:]))}']
    rest = len(low) - 1
    tail = f" {_DIGITS}{{{rest}}}" if rest > 1 else f" {_DIGITS}" if rest else ""
    low_full = all(c == "0" for c in low[1:])  # low's first digit takes every tail
    high_full = all(c == "9" for c in high[1:])
    first, last = int(low[0]) + (not low_full), int(high[0]) - (not high_full)
    out = []
    if not low_full:
        out.append(f'"{low[0]}" {group(_same_length(low[1:], "9" * rest))}')
    if first <= last:
        out.append((f'"{first}"' if first == last else f"[{first}-{last}]") + tail)
    if not high_full:
        out.append(f'"{high[0]}" {group(_same_length("0" * rest, high[1:]))}')
    return out


def uint_range(low: int, high: int | None) -> str:
    """The non-negative integers from ``low`` to ``high`` (``None``: no end), no leading zeros."""
    if low < 0 or (high is not None and high < low):
        raise Unsupported(f"the integer range {low}..{high} is empty")
    width = len(str(low))
    last = width if high is None else len(str(high))
    out: list[str] = []
    for length in range(width, last + 1):
        start = str(low) if length == width else "1" + "0" * (length - 1)
        end = "9" * length if high is None or length < last else str(high)
        out += _same_length(start, end)
    if high is None:  # every longer number
        out.append(f"[1-9] {_DIGITS}{{{width},}}")
    return group(out)


def int_range(low: int | None, high: int | None) -> str:
    """The integers from ``low`` to ``high`` (inclusive; ``None``: unbounded) as JSON."""
    if low is not None and high is not None and high < low:
        raise Unsupported(f"no integer is in {low}..{high}")
    out = []
    if high is None or high >= 0:
        out.append(uint_range(max(low, 0) if low is not None else 0, high))
    if low is None or low < 0:
        magnitude_low = 1 if high is None or high >= 0 else -high
        out.append(f'"-" {uint_range(magnitude_low, None if low is None else -low)}')
    return group(out)


def _numeric_bounds(schema: dict[str, object]) -> Iterator[tuple[str, int | float]]:
    """The schema's bound keywords that are set, with their values (checked to be numbers)."""
    for key in BOUND_KEYS:
        value = schema.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unsupported(f"{key} {value!r} is not a number")
        yield key, value


def integer_bounds(schema: dict[str, object]) -> tuple[int | None, int | None]:
    """An integer schema's bounds as inclusive integers (``None``: none)."""
    lows: list[int] = []
    highs: list[int] = []
    for key, value in _numeric_bounds(schema):
        if value != value or value in (float("inf"), float("-inf")):
            raise Unsupported(f"{key} {value!r}")
        floor, ceil = _floor(value), -_floor(-value)
        exclusive = key.startswith("exclusive")
        if key.lower().endswith("minimum"):
            lows.append(floor + 1 if exclusive else ceil)
        else:
            highs.append(ceil - 1 if exclusive else floor)
    return max(lows, default=None), min(highs, default=None)


def _floor(value: int | float) -> int:
    return value if isinstance(value, int) else int(value // 1)


_ANY_FRACTION: Final = '( "." [0-9]+ )?'
_ZERO_FRACTION: Final = '( "." "0"+ )?'
_NONZERO_FRACTION: Final = '"." [0-9]* [1-9] [0-9]*'


def _magnitude(low: int, low_open: bool, high: int | None, high_open: bool) -> list[str]:
    """Alternatives for unsigned decimals (no exponent) between the bounds."""
    if high is not None and (high < low or (high == low and (low_open or high_open))):
        return []
    out = []
    middle_low, middle_high = low + 1, None if high is None else high - 1
    if middle_high is None or middle_high >= middle_low:
        out.append(f"{uint_range(middle_low, middle_high)} {_ANY_FRACTION}")
    # At the lower bound: any fraction, or a nonzero one when the bound is excluded.
    at_low = _NONZERO_FRACTION if low_open else _ANY_FRACTION
    if high == low:  # then both bounds are included: only zeros after the point
        at_low = _ZERO_FRACTION
    out.append(f'"{low}" {at_low}')
    if high is not None and high > low and not high_open:
        out.append(f'"{high}" {_ZERO_FRACTION}')
    return out


def number_range(schema: dict[str, object]) -> str:
    """JSON numbers within the schema's bounds, which must be whole numbers."""
    bounds: dict[str, int] = {}
    for key, value in _numeric_bounds(schema):
        if isinstance(value, float) and not value.is_integer():
            raise Unsupported(f"{key} {value!r} (number bounds must be whole numbers)")
        bounds[key] = int(value)
    low, low_open = _tighter(bounds, "minimum", "exclusiveMinimum", lower=True)
    high, high_open = _tighter(bounds, "maximum", "exclusiveMaximum", lower=False)
    out = []
    # x >= 0, written without a sign.
    if high is None or high > 0 or (high == 0 and not high_open):
        if low is None or low < 0:
            out += _magnitude(0, False, high, high_open)
        else:
            out += _magnitude(low, low_open, high, high_open)
    # x < 0: "-" and a magnitude m > 0, with m <= -low and m >= -high.
    if low is None or low < 0:
        if high is None or high >= 0:
            m_low, m_low_open = 0, True
        else:
            m_low, m_low_open = -high, high_open
        negative = _magnitude(m_low, m_low_open, None if low is None else -low, low_open)
        if negative:
            out.append(f'"-" {group(negative)}')
    if not out:
        raise Unsupported(f"no number is within the bounds {bounds}")
    return group(out)


def _tighter(
    bounds: dict[str, int], closed: str, open_: str, lower: bool
) -> tuple[int | None, bool]:
    """The tighter of a closed and an open bound (``lower``: the larger; else the smaller)."""
    found = [(bounds[key], key == open_) for key in (closed, open_) if key in bounds]
    if not found:
        return None, False
    # An open bound is tighter than a closed one at the same value.
    if lower:
        return max(found, key=lambda b: (b[0], b[1]))
    return min(found, key=lambda b: (b[0], not b[1]))


# -- formats ----------------------------------------------------------------------------

# One character per item: every reader, however it splits text into lexemes, reads
# these the same way (a literal "02-" beside "0" [469] trips greedy lexers).
#: 0001 to 9999.
_YEAR: Final = '( [1-9] [0-9]{3} | "0" ( [1-9] [0-9]{2} | "0" ( [1-9] [0-9] | "0" [1-9] ) ) )'
#: Two digits that make a number divisible by 4, "00" left out.
_BY_FOUR: Final = '( "0" [48] | [2468] [048] | [13579] [26] )'
#: Leap years: divisible by 4 and not by 100, or by 400 (0000 is no year).
_LEAP_YEAR: Final = f'( [0-9] [0-9] {_BY_FOUR} | {_BY_FOUR} "0" "0" )'
_DAY_31: Final = '( "0" [1-9] | [12] [0-9] | "3" [01] )'
_DAY_30: Final = '( "0" [1-9] | [12] [0-9] | "3" "0" )'
_DAY_28: Final = '( "0" [1-9] | "1" [0-9] | "2" [0-8] )'
_MONTH_DAY: Final = (
    f'( ( "0" [13578] | "1" [02] ) "-" {_DAY_31} | ( "0" [469] | "1" "1" ) "-" {_DAY_30}'
    f' | "0" "2" "-" {_DAY_28} )'
)
_DATE: Final = f'( {_YEAR} "-" {_MONTH_DAY} | {_LEAP_YEAR} "-" "0" "2" "-" "2" "9" )'
_HOUR_MINUTE: Final = '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9]'
_TIME: Final = f'{_HOUR_MINUTE} ":" [0-5] [0-9] ( "." [0-9]+ )? ( "Z" | [+-] {_HOUR_MINUTE} )'
_HEX: Final = "[0-9a-fA-F]"

#: A string format's GBNF, for the text between the quotes.
FORMATS: Final = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f'{_DATE} "T" {_TIME}',
    "uuid": f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}',
    "email": '[A-Za-z0-9._%+-]+ "@" [A-Za-z0-9-]+ ( "." [A-Za-z0-9-]+ )+',
}


# -- patterns ---------------------------------------------------------------------------

Ranges = list[tuple[int, int]]
_SHORTHANDS: Final[dict[str, Ranges]] = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x20, 0x20)],  # tabs and newlines would need JSON escapes: a space only
}
_CONTROL_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


def char_escape(c: int) -> str:
    """``c`` as a GBNF character-class item."""
    if c < 0x100:
        return f"\\x{c:02x}"
    if c < 0x10000:
        return f"\\u{c:04x}"
    return chr(c)  # raw: not every GBNF reader knows \\U (llguidance's does not)


def _subtract(ranges: Ranges, minus: Ranges) -> Ranges:
    out: Ranges = []
    for low, high in sorted(ranges):
        pieces = [(low, high)]
        for m_low, m_high in minus:
            pieces = [
                part
                for a, b in pieces
                for part in ((a, min(b, m_low - 1)), (max(a, m_high + 1), b))
                if part[0] <= part[1]
            ]
        out += pieces
    return out


def _class(ranges: Ranges) -> str:
    """A GBNF class of ``ranges`` less the characters a raw JSON string cannot hold."""
    allowed = _subtract(ranges, list(_FORBIDDEN))
    if not allowed:
        raise Unsupported("a character class that allows no character a JSON string writes raw")
    items = "".join(
        char_escape(a) if a == b else f"{char_escape(a)}-{char_escape(b)}" for a, b in allowed
    )
    return f"[{items}]"


def _literal(char: str) -> str:
    text = json.dumps(char, ensure_ascii=False)[1:-1].replace("|", "\\u007c")
    out = "".join(
        "\\" + c if c in '"\\' else char_escape(ord(c)) if ord(c) < 0x20 else c for c in text
    )
    return f'"{out}"'


class _PatternReader:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise Unsupported("the pattern ends early")
        self.at += 1
        return char

    def alternatives(self, top: bool) -> str:
        branches = [self.sequence()]
        while self.peek() == "|":
            if top:
                raise Unsupported("a top-level '|' (each branch would be anchored at one end only)")
            self.take()
            branches.append(self.sequence())
        filled = [b for b in branches if b]
        if not filled:
            return ""
        body = group(filled)
        return f"( {body} )?" if len(filled) < len(branches) else body

    def sequence(self) -> str:
        items: list[str] = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return " ".join(item for item in items if item)

    def atom(self) -> str:
        char = self.take()
        if char == "(":
            if self.peek() == "?":
                self.take()
                if self.take() != ":":
                    raise Unsupported("groups other than (...) and (?:...)")
            body = self.alternatives(top=False)
            if self.take() != ")":
                raise Unsupported("an unbalanced '('")
            return f"( {body} )" if body else ""
        if char == "[":
            return self.character_class()
        if char == ".":
            return _class([(0, 0x09), (0x0B, _MAX_CHAR)])
        if char == "\\":
            return self.escape()
        if char in "^$":
            raise Unsupported(f"the anchor {char!r} inside the pattern")
        if char in "*+?{":
            raise Unsupported(f"{char!r} with nothing to repeat")
        if char == ")":
            raise Unsupported("an unbalanced ')'")
        return _literal(char)

    def escape(self) -> str:
        char = self.take()
        ranges = self.escape_ranges(char)
        if ranges is not None:
            return _class(ranges)
        code = self.escape_char(char)
        return _literal(chr(code))

    def escape_ranges(self, char: str) -> Ranges | None:
        if char in _SHORTHANDS:
            return _SHORTHANDS[char]
        if char in "DWS":
            raise Unsupported(f"\\{char} (a negated shorthand also matches non-ASCII text)")
        return None

    def escape_char(self, char: str) -> int:
        if char in _CONTROL_ESCAPES:
            return ord(_CONTROL_ESCAPES[char])
        if char in "xu":
            width = 2 if char == "x" else 4
            digits = self.text[self.at : self.at + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise Unsupported(f"the escape \\{char}{digits}")
            self.at += width
            return int(digits, 16)
        if char.isalnum() or char == "_":
            raise Unsupported(f"the escape \\{char} (anchors, back-references, ...)")
        return ord(char)

    def character_class(self) -> str:
        negated = self.peek() == "^"
        if negated:
            self.take()
        ranges: Ranges = []
        first = True
        while True:
            char = self.take()
            if char == "]" and not first:
                break
            first = False
            if char == "\\":
                escaped = self.take()
                shorthand = self.escape_ranges(escaped)
                if shorthand is not None:
                    ranges += shorthand
                    continue
                low = self.escape_char(escaped)
            elif char == "[" and self.peek() in ":=.":
                raise Unsupported("POSIX classes and set operations in a character class")
            else:
                low = ord(char)
            high = low
            if self.peek() == "-" and self.text[self.at + 1 : self.at + 2] not in ("]", ""):
                self.take()
                end = self.take()
                high = self.escape_char(self.take()) if end == "\\" else ord(end)
                if high < low:
                    raise Unsupported("a character range out of order")
            ranges.append((low, high))
        if negated:
            ranges = _subtract([(0, _MAX_CHAR)], sorted(ranges))
        return _class(ranges)

    def quantified(self, atom: str) -> str:
        char = self.peek()
        if char not in ("*", "+", "?", "{"):
            return atom
        self.take()
        if char == "{":
            close = self.text.find("}", self.at)
            numbers = self.text[self.at : close].split(",") if close >= 0 else []
            if (
                not 1 <= len(numbers) <= 2
                or not all(n.isdigit() for n in numbers if n)
                or not any(numbers)
            ):
                raise Unsupported("a '{' that is no {m}, {m,} or {m,n}")
            if not numbers[0]:
                numbers[0] = "0"
            self.at = close + 1
            low = int(numbers[0])
            high = low if len(numbers) == 1 else None if not numbers[1] else int(numbers[1])
            if high is not None and high < low:
                raise Unsupported("a repetition {m,n} with n < m")
            suffix = f"{{{low}}}" if high == low else f"{{{low},{'' if high is None else high}}}"
        else:
            suffix = char
        if self.peek() == "+":
            raise Unsupported("a possessive quantifier")
        if self.peek() == "?":
            self.take()  # lazy: the same strings, when the whole string must match
        if self.peek() in ("*", "+", "?", "{"):
            raise Unsupported("a quantifier on a quantifier")
        return f"( {atom} ){suffix}" if atom else ""


def pattern(regex: str) -> str:
    """GBNF for the text (between the quotes) of a string that matches ``regex``."""
    if len(regex) < 2 or not regex.startswith("^") or not regex.endswith("$"):
        raise Unsupported(f"the pattern {regex!r} is not anchored with '^' and '$'")
    inner = regex[1:-1]
    if (len(inner) - len(inner.rstrip("\\"))) % 2:
        raise Unsupported(f"the pattern {regex!r} is not anchored with '^' and '$'")
    reader = _PatternReader(inner)
    body = reader.alternatives(top=True)
    if reader.at != len(inner):
        raise Unsupported(f"the pattern {regex!r}: an unbalanced ')'")
    return body
