"""JSON schemas compiled to llama.cpp GBNF, checked against jsonschema on generated schemas.

Schemas are drawn by hypothesis from the keywords the GBNF enforces (integer and
number ranges, ``pattern``, ``format``, string lengths, enums, objects with required
and optional properties and extra keys, arrays). Two properties are checked, with
the GBNF read back by llguidance's own GBNF reader (as in test_engine_llamacpp):

* *sound*: strings sampled under the grammar (a random walk over the ids it allows)
  all parse and validate against the schema, formats included;
* *complete enough*: valid instances drawn for the schema (JSON text written the way
  the GBNF writes it: no exponent in a bounded number, ``|`` as ``\\u007c``) are
  accepted, in any key order.
"""

from __future__ import annotations

import datetime
import json
import random
import re
from typing import Any

import pytest

pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed")

from gbnf_recognizer import Grammar  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_engine_llamacpp import _gbnf_back_to_lark  # noqa: E402

from harmonia import HarmonyEncodingName, load_harmony_encoding  # noqa: E402
from harmonia.engines.llamacpp import lark_to_gbnf  # noqa: E402

ENC = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
RETURN = 200002
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_RFC3339_TIME = re.compile(
    r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)", re.ASCII
)
FORMATS = jsonschema.FormatChecker(formats=("date", "uuid", "email"))


@FORMATS.checks("time")
def _is_time(value: object) -> bool:
    return not isinstance(value, str) or _RFC3339_TIME.fullmatch(value) is not None


@FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    day, _, time = value.partition("T")
    return FORMATS.conforms(day, "date") and _is_time(time)


def valid(schema: dict[str, Any], value: Any) -> bool:
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
    return not list(validator.iter_errors(value))


def loads(text: str, declared: set[str]) -> Any:
    """JSON, with a declared key repeated an error (json.loads keeps the last one silently).

    Extra keys may repeat each other: every value of one satisfies the same schema, and
    no grammar can tell an unbounded set of keys apart.
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items if key in declared]
        assert len(keys) == len(set(keys)), f"a declared key repeated in {text!r}"
        return dict(items)

    return json.loads(text, object_pairs_hook=pairs)


def valid_text(schema: dict[str, Any], text: str) -> bool:
    # The generated schemas have objects at the top only: their names are the declared ones.
    declared = set(schema.get("properties", {})) | set(schema.get("required", []))
    try:
        value = loads(text, declared)
    except AssertionError:
        return False
    return valid(schema, value)


def grammar(schema: dict[str, Any]) -> Grammar:
    return Grammar(lark_to_gbnf(f"start: args\nargs: %json {json.dumps(schema)}\n"))


def dumps(value: Any) -> str:
    # As the GBNF writes JSON: '|' only escaped (keeps "<|" out of strings).
    return json.dumps(value, ensure_ascii=False).replace("|", "\\u007c")


# -- schemas and their instances --------------------------------------------------------

PIECES = ["[a-z]", "[0-9]", "\\d", "[A-F0-9]", "x", "\\.", "-", "(ab|c)", '[^,"\\\\]', "\\|"]
QUANTIFIERS = ["", "?", "*", "+", "{2}", "{1,3}", "{0,}"]
SAFE_TEXT = st.characters(
    codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters='"\\|<'
)


def bounded(draw: Any, kind: str, lows: tuple[int, int], top: int, gap: int) -> dict[str, Any]:
    """A ``kind`` schema with bounds drawn from ``lows`` (up to ``top`` above): none, one or
    both, each inclusive or exclusive, at least ``gap`` apart."""
    low = draw(st.none() | st.integers(*lows))
    high = draw(st.none() | st.integers(low + gap if low is not None else lows[0], top))
    schema: dict[str, Any] = {"type": kind}
    if low is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = high
    return schema


@st.composite
def integer_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    schema = bounded(draw, "integer", (-2000, 2000), 2500, gap=2)
    values = st.integers(-3000, 3000).filter(lambda v: valid(schema, v))
    return schema, values.map(dumps)


@st.composite
def number_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    schema = bounded(draw, "number", (-50, 50), 60, gap=1)
    # Decimal text without an exponent, as a bounded number is written.
    texts = st.builds(
        lambda n, frac: f"{n}.{frac}" if frac else str(n),
        st.integers(-70, 70),
        st.sampled_from(["", "0", "5", "25", "001", "999"]),
    ).filter(lambda text: text not in ("-0",) and valid(schema, json.loads(text)))
    return schema, texts


@st.composite
def pattern_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    parts = draw(
        st.lists(
            st.tuples(st.sampled_from(PIECES), st.sampled_from(QUANTIFIERS)), min_size=1, max_size=4
        )
    )
    regex = "^" + "".join(piece + quantifier for piece, quantifier in parts) + "$"
    schema = {"type": "string", "pattern": regex}
    texts = (
        st.from_regex(
            regex, fullmatch=True, alphabet=st.characters(codec="ascii", min_codepoint=0x20)
        )
        .filter(
            lambda s: (
                re.search(regex, s) is not None
                and not re.search(r'["\\\x00-\x1f]', s)
                and "\n" not in s
            )
        )
        .filter(lambda s: all(ord(c) < 0x80 for c in s))
    )
    # \d in a Python pattern matches every Unicode digit; the GBNF writes ASCII ones.
    return schema, texts.filter(
        lambda s: not re.search(r"\d", s) or re.fullmatch(r"[\x20-\x7e]*", s) is not None
    ).map(dumps)


def _time() -> Any:
    zone = st.sampled_from(["Z", "+05:30", "-11:00", "+00:00"])
    fraction = st.sampled_from(["", ".5", ".123456"])
    return st.builds(lambda t, f, z: t.strftime("%H:%M:%S") + f + z, st.times(), fraction, zone)


FORMAT_VALUES = {
    "date": st.dates().map(lambda d: d.isoformat()),
    "time": _time(),
    "date-time": st.builds(lambda d, t: f"{d.isoformat()}T{t}", st.dates(), _time()),
    "uuid": st.uuids().map(str),
    "email": st.from_regex(r"[a-z0-9._%+-]{1,8}@[a-z0-9-]{1,8}(\.[a-z]{2,4}){1,2}", fullmatch=True),
}


@st.composite
def format_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    form = draw(st.sampled_from(sorted(FORMAT_VALUES)))
    return {"type": "string", "format": form}, FORMAT_VALUES[form].map(dumps)


@st.composite
def other_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    kind = draw(st.sampled_from(["string", "enum", "boolean", "length"]))
    if kind == "string":
        return {"type": "string"}, st.text(SAFE_TEXT, max_size=6).map(dumps)
    if kind == "length":
        low = draw(st.integers(0, 3))
        high = draw(st.integers(low, 6))
        schema = {"type": "string", "minLength": low, "maxLength": high}
        return schema, st.text(SAFE_TEXT, min_size=low, max_size=high).map(dumps)
    if kind == "enum":
        values = draw(
            st.lists(
                st.sampled_from(["a", "b c", 1, None, True]), min_size=1, max_size=3, unique=True
            )
        )
        return {"enum": values}, st.sampled_from(values).map(dumps)
    return {"type": "boolean"}, st.booleans().map(dumps)


LEAVES = integer_schema() | number_schema() | pattern_schema() | format_schema() | other_schema()


@st.composite
def object_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    names = draw(
        st.lists(
            st.sampled_from(["a", "ab", "b", "id", "n", "when"]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    leaves = {name: draw(LEAVES) for name in names}
    required = [n for n in names if draw(st.booleans())]
    extra = draw(st.sampled_from([False, True, "leaf"]))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {n: leaf[0] for n, leaf in leaves.items()},
        "required": required,
    }
    extra_leaf = draw(LEAVES) if extra == "leaf" else None
    if extra_leaf is not None:
        schema["additionalProperties"] = extra_leaf[0]
    elif extra is False:
        schema["additionalProperties"] = False

    @st.composite
    def instance(draw2: Any) -> str:
        keys = [n for n in names if n in required or draw2(st.booleans())]
        members = [(n, draw2(leaves[n][1])) for n in keys]
        if extra is not False:
            extra_values = extra_leaf[1] if extra_leaf is not None else st.just("1")
            for key in draw2(
                st.lists(st.sampled_from(["zz", "a b", "é", "abc", ""]), max_size=2, unique=True)
            ):
                if key not in names:
                    members.append((key, draw2(extra_values)))
        order = draw2(st.permutations(members))
        return "{" + ", ".join(f"{dumps(k)}: {v}" for k, v in order) + "}"

    return schema, instance()


@st.composite
def array_schema(draw: Any) -> tuple[dict[str, Any], Any]:
    item_schema, items = draw(LEAVES)
    low = draw(st.integers(0, 2))
    high = draw(st.integers(low, 4))
    schema = {"type": "array", "items": item_schema, "minItems": low, "maxItems": high}
    texts = st.lists(items, min_size=low, max_size=high).map(lambda xs: "[" + ",".join(xs) + "]")
    return schema, texts


SCHEMAS = LEAVES | object_schema() | array_schema()


@SETTINGS
@given(data=st.data())
def test_valid_instances_are_accepted(data: Any) -> None:
    schema, instances = data.draw(SCHEMAS, label="schema")
    gbnf = grammar(schema)
    for _ in range(5):
        text = data.draw(instances, label="instance")
        assert valid_text(schema, text), text  # the generator's own check
        assert gbnf.accepts(text), f"{schema}: refused the valid {text}"


@SETTINGS
@given(case=SCHEMAS, seed=st.integers(0, 2**16))
def test_every_string_the_grammar_writes_validates(
    case: tuple[dict[str, Any], Any], seed: int
) -> None:
    schema, _ = case
    gbnf = grammar(schema)
    rng = random.Random(seed)
    for _ in range(20):
        text = gbnf.sample(rng)
        assert gbnf.accepts(text)  # the reader agrees with itself
        assert valid_text(schema, text), f"{schema}: the grammar wrote the invalid {text!r}"


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (
            {"type": "integer", "minimum": 17, "maximum": 342},
            ["17", "99", "100", "342"],
            ["16", "343", "017", "-0", "1000", "17.0"],
        ),
        (
            {"type": "integer", "exclusiveMinimum": -5.5, "exclusiveMaximum": 3},
            ["-5", "2"],
            ["-6", "3"],
        ),
        (
            {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            ["0", "0.999"],
            ["1", "1.0", "-0.1"],
        ),
        (
            {"type": "number", "exclusiveMinimum": -2, "maximum": 5},
            ["-1.5", "5.00"],
            ["-2.0", "5.01"],
        ),
        (
            {"type": "string", "format": "uuid"},
            ['"12345678-1234-1234-1234-123456789abc"'],
            ['"12345678-1234-1234-1234-123456789ab"'],
        ),
        ({"type": "string", "pattern": "^a\\|b$"}, ['"a\\u007cb"'], ['"a|b"']),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "additionalProperties": True,
            },
            ['{"b": 1, "a": 2}', '{"a ": 1}'],
            ['{"a": 1, "a": 2}', '{"b": 1, "a": 2, "a": 3}'],  # a declared key repeated
        ),
    ],
)
def test_edges(schema: dict[str, Any], good: list[str], bad: list[str]) -> None:
    gbnf = grammar(schema)
    for text in good:
        assert valid_text(schema, text) and gbnf.accepts(text), text
    for text in bad:
        assert not gbnf.accepts(text), text


def test_the_date_format_knows_leap_years() -> None:
    gbnf = grammar({"type": "string", "format": "date"})
    for year in (1900, 1996, 2000, 2023, 2024, 2100, 2400):
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        assert gbnf.accepts(f'"{year:04d}-02-29"') == leap, year
    day = datetime.date(2024, 1, 1)
    while day.year == 2024:  # every day of a leap year, and nothing after the last
        assert gbnf.accepts(f'"{day.isoformat()}"'), day
        day += datetime.timedelta(days=1)
    assert not gbnf.accepts('"2024-12-32"') and not gbnf.accepts('"2024-13-01"')


#: One schema with every keyword, and strings on both sides of each.
EVERYTHING = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": -15, "exclusiveMaximum": 120},
        "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 2},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}(\\.[a-z]+)?$"},
        "on": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
    },
    "required": ["n", "code"],
    "additionalProperties": {"type": "string", "format": "date"},
}
EVERYTHING_TEXTS = [
    ('{"n": -15, "code": "AB-12"}', True),
    ('{"code": "AB-123.xy", "n": 119, "x": 2.0}', True),
    ('{"n": 0, "code": "ZZ-000", "on": "2024-02-29T12:00:00.5+01:00", "zz": "2000-02-29"}', True),
    ('{"id": "0123abcd-0000-4000-8000-00000000abcd", "n": 1, "code": "QQ-99"}', True),
    ('{"n": 120, "code": "AB-12"}', False),
    ('{"n": 1, "code": "AB-12", "x": 0}', False),
    ('{"n": 1, "code": "AB-1234"}', False),
    ('{"n": 1, "code": "AB-12", "zz": "1900-02-29"}', False),
    ('{"n": 1, "code": "AB-12", "n": 2}', False),
    ('{"n": 1}', False),
]


def test_the_reader_agrees_with_llguidances_gbnf_reader() -> None:
    # The property tests above use the small reader in gbnf_recognizer; llguidance's own
    # GBNF reader (as test_engine_llamacpp uses) must say the same on every keyword.
    from harmonia.constrained import TurnMatcher

    gbnf_text = lark_to_gbnf(f"start: args\nargs: %json {json.dumps(EVERYTHING)}\n")
    fresh = TurnMatcher(_gbnf_back_to_lark(gbnf_text))
    mine = Grammar(gbnf_text)
    for text, ok in EVERYTHING_TEXTS:
        assert valid_text(EVERYTHING, text) == ok, text
        m = fresh.copy()
        try:
            m.consume_all([*ENC.encode_ordinary(text), RETURN])
            theirs = m.is_finished
        except Exception as exc:  # the matcher's rejection
            assert "rejected" in str(exc), exc
            theirs = False
        assert theirs == ok == mine.accepts(text), text
