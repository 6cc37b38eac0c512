"""serde_json-compatible JSON handling.

The reference library hands every tool schema to Rust as text: Python's
``json.dumps`` writes it, ``serde_json`` (default features, ``preserve_order``)
parses it, and whatever the TypeScript converter prints as JSON (defaults) is
serde's compact serialisation of the *parsed* value.  Both halves leave
fingerprints in the output, so this module emulates both:

* :func:`serde_roundtrip` turns a Python value into exactly the value serde
  would hold after parsing ``json.dumps(value)`` (keys stringified, duplicate
  keys merged, surrogate pairs joined, big integers turned into floats, floats
  re-parsed with serde's *not correctly rounded* fast path);
* :func:`emit_serde_json` prints such a value the way serde does (``ryu`` float
  layout, serde's string escaping, no whitespace);
* :func:`to_serde_json` is the composition of the two.

>>> to_serde_json({"a": [1, 2.0, "é\\n", None, True]})
'{"a":[1,2.0,"é\\\\n",null,true]}'
>>> to_serde_json(0.9641532750770685)
'0.9641532750770684'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias, cast

from .._errors import InputError, InputTypeError

__all__ = [
    "MAX_NESTING",
    "JsonValue",
    "RoundTripped",
    "emit_serde_json",
    "format_f64",
    "parse_serde_number",
    "serde_parse",
    "serde_roundtrip",
    "to_serde_json",
    "too_deep",
]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

#: How many levels of containers a system or developer content (the object itself is
#: level 1) may nest before rendering refuses it. The reference's serde_json stops at
#: 128 levels of the *whole* message, in which a content sits at least two levels
#: down, so everything the reference renders stays within this; anything deeper
#: would otherwise exhaust Python's recursion limit in the schema converters.
MAX_NESTING = 128

_U64_MAX = 2**64 - 1
_I64_MIN = -(2**63)
_I32_MAX = 2**31 - 1

# serde switches from integer to float accumulation once ``significand * 10 +
# digit`` would exceed u64::MAX; these are the two halves of that test.
_OVERFLOW_QUOTIENT, _OVERFLOW_REMAINDER = divmod(_U64_MAX, 10)

# serde multiplies/divides by a table of the nearest doubles to 10**k.  Python's
# int -> float conversion is correctly rounded, so it yields the same table.
_POW10: tuple[float, ...] = tuple(float(10**k) for k in range(309))

# serde_json's escape table: the short escapes, then every other C0 control as
# a lower-case \u00xx.  Everything else (DEL, non-ASCII, "/") is written raw.
_ESCAPES: Final[dict[int, str]] = {code: f"\\u{code:04x}" for code in range(0x20)}
_ESCAPES.update(
    {ord(char): "\\" + short for char, short in zip('"\\\b\f\n\r\t', '"\\bfnrt', strict=True)}
)


# -- Parsing half: what serde holds after reading Python's json.dumps text ---


def serde_roundtrip(value: object, max_depth: int | None = None) -> JsonValue:
    """Return the value serde_json would hold after parsing ``json.dumps(value)``.

    ``max_depth`` bounds the container nesting (the value itself counts as one
    level), mirroring serde's recursion limit; the caller knows how deep the
    value sits inside the full message JSON.  Raises ``ValueError`` where serde
    would reject the text (NaN/Infinity, lone surrogates, numbers out of range,
    nesting too deep) and ``TypeError`` where ``json.dumps`` itself would.

    >>> serde_roundtrip({1: "a", "1": "b", None: (1.5, 2**64)})
    {'1': 'b', 'null': [1.5, 1.8446744073709552e+19]}

    A :class:`RoundTripped` value is returned as it is.
    """
    if type(value) is RoundTripped:
        return value.value
    if max_depth is None:
        # The C json module does the same round trip many times faster: json.dumps
        # writes exactly the text the reference hands to serde, and json.loads reads
        # it back with serde's number rules plugged in. It differs from serde only on
        # surrogates (kept, where serde joins pairs or refuses) and on NaN/Infinity
        # (read, where serde refuses); both are sent to the exact walk below, as is
        # anything json.dumps refuses, so that the error is the same either way.
        try:
            text = _dumps(value)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            if text.isascii() or _SURROGATE.search(text) is None:
                return cast("JsonValue", _loads(text))
    return _roundtrip(value, max_depth)


_CONTAINERS = (dict, list, tuple)
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(slots=True, eq=False)
class RoundTripped:
    """A value :func:`serde_roundtrip` has already produced (it returns it as it is).

    Lets a caller that parsed the JSON text itself hand the result to code that
    round-trips its input, such as the TypeScript converters.
    """

    value: JsonValue


def serde_parse(text: str, value: object) -> JsonValue:
    """What ``serde_roundtrip(value)`` returns, given ``text == write_json(value)``.

    The text is the one ``json.dumps`` writes and the reference hands to serde,
    so parsing it with serde's number rules is the round trip without writing
    the text again. Where the C parser would differ from serde (surrogate escapes,
    NaN and Infinity) the value takes the exact way, which also raises serde's error.

    >>> serde_parse(write_json({"a": 0.9641532750770685}), None)
    {'a': 0.9641532750770684}
    """
    if "\\ud" not in text:
        try:
            return cast("JsonValue", _loads(text))
        except _NotSerde:
            pass
    return serde_roundtrip(value)


def too_deep(value: object, limit: int) -> str | None:
    """The path of the first container nested more than ``limit`` levels deep, else None.

    Iterative, so it answers for any depth (and for a container that holds
    itself) without recursing. The path is written like ``.tools[0].name``.

    >>> too_deep({"a": [[1]]}, 3), too_deep({"a": [[1]]}, 2)
    (None, '.a[0]')
    """
    # A first pass without paths (cheap), a second with them only when needed.
    shallow: list[tuple[object, int]] = [(value, 1)] if isinstance(value, _CONTAINERS) else []
    while shallow:
        node, depth = shallow.pop()
        if depth > limit:
            break
        items = node.values() if isinstance(node, dict) else cast("list[object]", node)
        shallow.extend((item, depth + 1) for item in items if isinstance(item, _CONTAINERS))
    else:
        return None
    stack: list[tuple[object, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, dict):
            children = [(f".{key}", item) for key, item in node.items()]
        elif isinstance(node, (list, tuple)):
            children = [(f"[{index}]", item) for index, item in enumerate(node)]
        else:
            continue
        if depth > limit:
            return path
        stack.extend((child, depth + 1, path + suffix) for suffix, child in reversed(children))
    return None


def _roundtrip(value: object, depth_left: int | None) -> JsonValue:
    # Order matters: bool is an int subclass and must be checked first, just
    # as json.dumps does.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _join_surrogates(value)
    if isinstance(value, int):
        return parse_serde_number(int.__repr__(value))
    if isinstance(value, float):
        return _roundtrip_float(value)
    if isinstance(value, (dict, list, tuple)):
        if depth_left is not None and depth_left <= 0:
            raise InputError("recursion limit exceeded")
        inner = None if depth_left is None else depth_left - 1
        if isinstance(value, dict):
            return _roundtrip_object(value, inner)
        return [_roundtrip(item, inner) for item in value]
    raise InputTypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _roundtrip_float(value: float) -> float | int:
    # json.dumps writes NaN/Infinity tokens, which are not JSON: serde fails.
    if not math.isfinite(value):
        raise InputError(f"{value!r} is not valid JSON")
    return parse_serde_number(float.__repr__(value))


def _roundtrip_object(value: dict[object, object], depth_left: int | None) -> JsonValue:
    result: dict[str, JsonValue] = {}
    for key, item in value.items():
        # Assigning to an existing key keeps its first position and replaces
        # the value: the same as serde's IndexMap when json.dumps wrote two
        # equal keys (e.g. 1 and "1").
        result[_json_key(key)] = _roundtrip(item, depth_left)
    return result


def _json_key(key: object) -> str:
    # json.dumps' key coercion rules; non-finite floats become the bare words,
    # which are fine *inside* a string.
    if isinstance(key, str):
        return _join_surrogates(key)
    if isinstance(key, float):
        if math.isnan(key):
            return "NaN"
        if math.isinf(key):
            return "Infinity" if key > 0 else "-Infinity"
        return float.__repr__(key)
    if key is None or isinstance(key, bool):
        return json.dumps(key)  # null, true, false
    if isinstance(key, int):
        return int.__repr__(key)
    raise InputTypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _join_surrogates(text: str) -> str:
    """Mimic ``\\uXXXX`` escaping by json.dumps followed by serde's unescaping.

    A high+low surrogate pair is written as two escapes that serde decodes to
    one astral character; any other surrogate is rejected by serde.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text  # fast path: the overwhelmingly common case
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1 : index + 2]
        if "\ud800" <= char <= "\udbff" and "\udc00" <= following <= "\udfff":
            out.append(chr(0x10000 + ((ord(char) - 0xD800) << 10) + ord(following) - 0xDC00))
            index += 2
            continue
        if "\ud800" <= char <= "\udfff":
            raise InputError(f"lone surrogate {char!r} cannot be encoded as JSON")
        out.append(char)
        index += 1
    return "".join(out)


def parse_serde_number(text: str) -> int | float:
    """Parse a JSON number the way serde_json does without ``float_roundtrip``.

    Integers in u64/i64 range stay integers; everything else becomes a float
    through a decimal significand and a POW10 table multiply/divide, which is
    *not* correctly rounded (off by one ulp for many 17-digit inputs).

    >>> parse_serde_number("0.9641532750770685")
    0.9641532750770684
    >>> parse_serde_number("-9223372036854775809")
    -9.223372036854776e+18
    """
    negative = text.startswith("-")
    body = text[1:] if negative else text
    mantissa, has_exponent, exponent_text = body.partition("e" if "e" in body else "E")
    integer_part, has_point, fraction = mantissa.partition(".")

    significand, exponent, overflowed = _accumulate(integer_part, 0, 0, integer_digits=True)
    if not has_point and not has_exponent and not overflowed:
        return _integer_result(significand, negative)
    if has_point:
        # serde keeps testing fraction digits against the overflow bound even
        # after the integer part overflowed (unreachable from json.dumps text).
        significand, exponent, _ = _accumulate(fraction, significand, exponent, False)
    if has_exponent:
        explicit = int(exponent_text)
        if abs(explicit) > _I32_MAX:
            # serde's exponent overflow rule: zero or tiny -> signed zero.
            if significand == 0 or explicit < 0:
                return -0.0 if negative else 0.0
            raise InputError("number out of range")
        exponent += explicit
    return _f64_from_parts(negative, significand, exponent)


def _accumulate(
    digits: str, significand: int, exponent: int, integer_digits: bool
) -> tuple[int, int, bool]:
    """Fold decimal digits into a u64 significand, stopping at overflow.

    After overflow, remaining integer digits only scale the exponent and
    remaining fraction digits are dropped; accepted fraction digits each lower
    the exponent.  Returns (significand, exponent, overflowed).
    """
    for position, char in enumerate(digits):
        digit = ord(char) - 48
        if significand > _OVERFLOW_QUOTIENT or (
            significand == _OVERFLOW_QUOTIENT and digit > _OVERFLOW_REMAINDER
        ):
            if integer_digits:
                exponent += len(digits) - position
            return significand, exponent, True
        significand = significand * 10 + digit
        if not integer_digits:
            exponent -= 1
    return significand, exponent, False


def _integer_result(significand: int, negative: bool) -> int | float:
    if not negative:
        return significand
    if 0 < significand <= -_I64_MIN:
        return -significand
    # Below i64::MIN, and for "-0" (which Python never writes), serde falls
    # back to a float.
    return -float(significand)


def _f64_from_parts(negative: bool, significand: int, exponent: int) -> float:
    value = float(significand)
    while True:
        if abs(exponent) < len(_POW10):
            if exponent >= 0:
                value *= _POW10[exponent]
                if math.isinf(value):
                    raise InputError("number out of range")
            else:
                value /= _POW10[-exponent]
            break
        if value == 0.0:
            break
        if exponent >= 0:
            raise InputError("number out of range")
        # Very negative exponents are applied in steps so the table suffices.
        value /= 1e308
        exponent += 308
    return -value if negative else value


# -- Printing half: serde's compact writer ---------------------------------


def to_serde_json(value: object) -> str:
    """Serialise like the reference: json.dumps -> serde parse -> serde print.

    >>> to_serde_json([2**64, 1e16, 3e-05, -0.0, 'q"\\x01'])
    '[1.8446744073709552e19,1e16,0.00003,-0.0,"q\\\\"\\\\u0001"]'
    """
    return emit_serde_json(serde_roundtrip(value))


def emit_serde_json(value: JsonValue) -> str:
    """Print an already round-tripped value exactly like ``serde_json::to_string``."""
    parts: list[str] = []
    _emit(value, parts)
    return "".join(parts)


def _emit(value: JsonValue, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_quote(value))
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(format_f64(value))
    elif isinstance(value, list):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _emit(item, parts)
        parts.append("]")
    else:
        parts.append("{")
        for index, (key, item) in enumerate(value.items()):
            parts.append(f",{_quote(key)}:" if index else f"{_quote(key)}:")
            _emit(item, parts)
        parts.append("}")


def _quote(text: str) -> str:
    return '"' + text.translate(_ESCAPES) + '"'


def format_f64(value: float) -> str:
    """Lay out a finite float the way Rust's ``ryu`` does.

    Python's ``repr`` already yields the shortest round-trip digits; only the
    placement of point and exponent differs (``1e16`` not ``1e+16``, ``0.00003``
    not ``3e-05``, always a ``.0`` on integral values in plain notation).

    >>> [format_f64(x) for x in (100.0, 1e16, 3e-05, 1.5e-07, 1.2345678901234568e20, -0.0)]
    ['100.0', '1e16', '0.00003', '1.5e-7', '1.2345678901234568e20', '-0.0']
    """
    if not math.isfinite(value):
        raise InputError(f"{value!r} is not valid JSON")
    text = float.__repr__(value)
    sign = "-" if text.startswith("-") else ""
    digits, point = _shortest_digits(text.lstrip("-"))
    if not digits:
        return sign + "0.0"
    return sign + _ryu_layout(digits, point)


def _shortest_digits(text: str) -> tuple[str, int]:
    """Split a repr into significant digits d1..dn and kk with value 0.d1..dn * 10**kk."""
    mantissa, _, exponent = text.partition("e")
    integer_part, _, fraction = mantissa.partition(".")
    digits = integer_part + fraction
    point = len(integer_part) + int(exponent or 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def _ryu_layout(digits: str, point: int) -> str:
    count = len(digits)
    if count <= point <= 16:
        return digits + "0" * (point - count) + ".0"
    if 0 < point <= 16:
        return digits[:point] + "." + digits[point:]
    if -5 < point <= 0:
        return "0." + "0" * -point + digits
    if count == 1:
        return f"{digits}e{point - 1}"
    return f"{digits[0]}.{digits[1:]}e{point - 1}"


def _parse_int(text: str) -> int | float:
    # Up to 18 digits always fits in an i64; longer ones may become floats.
    return int(text) if len(text) < 19 else parse_serde_number(text)


def _json_writer(ensure_ascii: bool, allow_nan: bool) -> Callable[[object], str]:
    """``json.dumps`` with these options, without its per-call setup.

    ``json.dumps`` builds a new C encoder on every call, which costs more than
    writing a small schema; this one is built once. It keeps no circular-reference
    markers (a value that holds itself ends in ``RecursionError``, which callers
    treat like any value the fast path cannot take).
    """
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan).encode
    quote = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring

    def default(value: object) -> object:
        raise InputTypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    chunks = c_make_encoder(None, default, quote, None, ": ", ", ", False, False, allow_nan)

    def write(value: object) -> str:
        return "".join(chunks(value, 0))

    return write


#: json.dumps(value) for values made of dicts, lists, strings, numbers, bools and None.
write_json: Final = _json_writer(ensure_ascii=True, allow_nan=True)
_dumps = _json_writer(ensure_ascii=False, allow_nan=False)


class _NotSerde(Exception):
    """A token serde_json refuses (NaN, Infinity)."""


def _refuse_constant(name: str) -> object:
    raise _NotSerde(name)


_loads = json.JSONDecoder(
    parse_float=parse_serde_number, parse_int=_parse_int, parse_constant=_refuse_constant
).decode
