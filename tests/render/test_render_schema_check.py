"""The schema check's quick pass agrees with the walk that keeps paths."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from harmonia import RenderError
from harmonia._render.schema_check import _check_with_paths, _looks_valid, check_schema

_KEYWORDS = st.sampled_from(
    [
        "type", "properties", "items", "anyOf", "oneOf", "allOf", "prefixItems", "required",
        "enum", "$ref", "additionalProperties", "not", "$defs", "patternProperties",
        "description", "default", "if",
    ]
)  # fmt: skip
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from(["string", "object", "integer", "strnig", "null", "#/$defs/A", ""]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.dictionaries(_KEYWORDS | st.text(max_size=2), inner, max_size=4)
    ),
    max_leaves=16,
)


def _walk_accepts(schema: object) -> bool:
    try:
        _check_with_paths(schema, ".parameters")
    except RenderError:
        return False
    return True


@given(_VALUES)
def test_the_quick_pass_accepts_exactly_what_the_walk_accepts(schema: object) -> None:
    assert _looks_valid(schema) == _walk_accepts(schema)


def test_a_refused_schema_is_reported_with_its_path() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": [5]}}}
    try:
        check_schema(schema, ".parameters")
    except RenderError as exc:
        assert exc.path == ".parameters.properties.a.items[0]"
    else:
        raise AssertionError("a schema holding 5 as a subschema was accepted")
