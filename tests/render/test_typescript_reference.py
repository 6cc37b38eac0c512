"""OPTIONAL differential checks against the reference wheel (openai_harmony).

Everything here is skipped unless ``openai_harmony`` is importable and an
offline o200k vocabulary is available (``TIKTOKEN_ENCODINGS_BASE``; when it
is unset, harmonia writes one from its bundled ranks). CI does not install the
reference, which is acceptable only because ``test_typescript.py`` pins the
same behaviour without it; these tests exist to catch drift between that
spec-derived suite and the real library.
All tests carry the ``differential`` marker (``-m "not differential"`` skips
them explicitly).
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmonia import write_tiktoken_file
from harmonia._render.serde_json import to_serde_json
from harmonia._render.typescript import schema_to_typescript

harmony: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
if not (Path(os.environ.get("TIKTOKEN_ENCODINGS_BASE", "")) / "o200k_base.tiktoken").exists():
    # The reference would download its vocabulary; give it ours, offline.
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = os.path.dirname(write_tiktoken_file(tempfile.mkdtemp()))

pytestmark = pytest.mark.differential

CASES = json.loads(
    (Path(__file__).parent.parent / "data" / "typescript_cases.json").read_text(encoding="utf-8")
)
_PREFIX = "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n// d\n"
_SUFFIX = "\n\n} // namespace functions<|end|>"


@pytest.fixture(scope="module")
def reference_line() -> Any:
    """Return a function rendering the reference's `type f = ...;` line."""
    encoding = harmony.load_harmony_encoding(harmony.HarmonyEncodingName.HARMONY_GPT_OSS)

    def render(parameters: object) -> str:
        tool = harmony.ToolDescription.new("f", "d", parameters=parameters)
        content = harmony.DeveloperContent.new().with_function_tools([tool])
        message = harmony.Message.from_role_and_content(harmony.Role.DEVELOPER, content)
        text = encoding.decode_utf8(encoding.render(message))
        assert text.startswith(_PREFIX) and text.endswith(_SUFFIX)
        return str(text[len(_PREFIX) : -len(_SUFFIX)])

    return render


def mine(parameters: object) -> str:
    if parameters is None:
        return "type f = () => any;"
    return f"type f = (_: {schema_to_typescript(parameters)}) => any;"


def outcome(render: Any, parameters: object) -> str:
    """Rendered line, or a marker when the value cannot be rendered at all."""
    try:
        return str(render(parameters))
    except ValueError:
        return "<ValueError>"


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case_table_matches_reference(reference_line: Any, case: dict[str, str]) -> None:
    parameters = json.loads(case["parameters_json"])
    assert reference_line(parameters) == case["expected"] == mine(parameters)


finite_floats = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(finite_floats, st.integers()), min_size=1, max_size=20))
def test_number_printing_matches_reference(reference_line: Any, values: list[float]) -> None:
    line = reference_line({"type": "object", "properties": {"x": {"default": values}}})
    assert line == f"type f = (_: {{\nx?: any, // default: {to_serde_json(values)}\n}}) => any;"


# --------------------------------------------------------------------------
# Random schemas
# --------------------------------------------------------------------------

_TRICKY = ["", "a", "null", "nullable", 'x"y', "q\\z", "l1\nl2", "cr\r\nlf", "é☃😀", "\x01", " "]
texts = st.one_of(st.sampled_from(_TRICKY), st.text(max_size=6))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), finite_floats, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
type_names = st.sampled_from(["string", "number", "integer", "boolean", "array", "object", "null"])
leaf_keywords = {
    "type": st.one_of(type_names, st.lists(st.one_of(type_names, st.integers()), max_size=3)),
    "enum": st.lists(scalars, max_size=3),
    "description": st.one_of(texts, st.integers()),
    "title": texts,
    "examples": st.lists(json_values, max_size=3),
    "default": json_values,
    "nullable": st.one_of(st.booleans(), st.just(1)),
}


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    members = inner | st.sampled_from([True, "string"])  # non-object property schemas
    return st.fixed_dictionaries(
        {},
        optional={
            **leaf_keywords,
            "properties": st.dictionaries(st.sampled_from("abcd") | texts, members, max_size=4),
            "required": st.lists(st.sampled_from(["a", "b", "c", 1]), max_size=3),
            "items": inner,
            "oneOf": st.lists(inner, max_size=3),
            "anyOf": st.lists(inner, max_size=2),
        },
    )


schemas = st.recursive(st.fixed_dictionaries({}, optional=leaf_keywords), _extend, max_leaves=8)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schemas)
def test_random_schemas_match_reference(reference_line: Any, schema: dict[str, Any]) -> None:
    assert outcome(mine, schema) == outcome(reference_line, schema)


def _random_schema(rng: random.Random, depth: int = 0) -> Any:
    """Deterministic generator biased towards object/oneOf nesting."""
    schema: dict[str, Any] = {}
    if rng.random() < 0.8:
        schema["type"] = rng.choice(["string", "number", "integer", "boolean", "array", "object"])
    if depth < 3 and (schema.get("type") == "object" or rng.random() < 0.1):
        names = [rng.choice(["a", "b", "c", "my-key", ""]) for _ in range(rng.randint(0, 4))]
        schema["properties"] = {name: _random_schema(rng, depth + 1) for name in names}
        schema["required"] = rng.sample(["a", "b", "c"], rng.randint(0, 3))
    if depth < 3 and (schema.get("type") == "array" and rng.random() < 0.8):
        schema["items"] = _random_schema(rng, depth + 1)
    if depth < 3 and rng.random() < 0.15:
        schema["oneOf"] = [_random_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    for key, chance, make in (
        ("enum", 0.2, lambda: rng.sample([*_TRICKY, 1, None], rng.randint(0, 3))),
        ("description", 0.4, lambda: rng.choice(_TRICKY)),
        ("title", 0.1, lambda: rng.choice(_TRICKY)),
        ("examples", 0.1, lambda: rng.sample([*_TRICKY, 1.5], rng.randint(0, 2))),
        ("default", 0.3, lambda: rng.choice([*_TRICKY, 0.1, 1e16, 2**64, -0.0, None, [1]])),
        ("nullable", 0.2, lambda: rng.choice([True, False])),
    ):
        if rng.random() < chance:
            schema[key] = make()
    return schema


def test_seeded_random_schemas_match_reference(reference_line: Any) -> None:
    rng = random.Random(20250805)
    for _ in range(3000):
        schema = _random_schema(rng)
        assert outcome(mine, schema) == outcome(reference_line, schema), schema


@pytest.mark.parametrize("poison", [math.nan, math.inf, "\ud800", 10**400])
def test_unrenderable_values_fail_in_both(reference_line: Any, poison: object) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "x-extra": poison}
    assert outcome(mine, schema) == outcome(reference_line, schema) == "<ValueError>"
