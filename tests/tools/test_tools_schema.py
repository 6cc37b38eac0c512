"""Recipient resolution, schema tidying for harmony, argument validation and result text."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from harmonia import ToolError
from harmonia.tools import ToolCall, harmonize_schema, load_arguments
from harmonia.tools._arguments import validation_schema
from harmonia.tools._convert import to_json_text
from harmonia.tools._docstrings import parse_docstring
from harmonia.tools._route import clean_recipient, resolve_recipient

NAMESPACES = ["browser", "python", "functions", "crm"]
FUNCTIONS = {"functions": ["get_weather", "python"], "crm": ["lookup"], "browser": ["search"]}


@pytest.mark.parametrize(
    ("sampled", "expected"),
    [
        ("browser.search", ("browser.search", "browser", "search")),
        ("to=browser.search", ("browser.search", "browser", "search")),
        ("browser.search<|constrain|>json", ("browser.search", "browser", "search")),
        (" browser.search code", ("browser.search", "browser", "search")),
        ("functions.browser.search", ("browser.search", "browser", "search")),
        ("python", ("python", "python", None)),
        # a function really named "python" in functions wins over the alias
        ("functions.python", ("functions.python", "functions", "python")),
        ("lookup", ("crm.lookup", "crm", "lookup")),
        ("functions.get_weather", ("functions.get_weather", "functions", "get_weather")),
        ("weather.now", ("weather.now", "weather", "now")),
        ("nothing", ("nothing", "nothing", None)),
    ],
)
def test_resolve_recipient(sampled: str, expected: tuple[str, str, str | None]) -> None:
    assert resolve_recipient(sampled, NAMESPACES, FUNCTIONS) == expected


def test_functions_python_alias_without_such_a_function() -> None:
    assert resolve_recipient("functions.python", NAMESPACES, {"functions": []}) == (
        "python",
        "python",
        None,
    )
    assert clean_recipient("  ") == ""


def test_harmonize_schema_like_vllm_and_more() -> None:
    # what an MCP server built with the SDK lists for `open(id: int | str = -1, source: str|None)`
    mcp_schema = {
        "title": "openArguments",
        "type": "object",
        "properties": {
            "id": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "default": -1,
                "title": "Id",
            },
            "source": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "where": {"$ref": "#/$defs/Where"},
            "many": {
                "anyOf": [{"$ref": "#/$defs/Where"}, {"type": "integer"}, {"type": "null"}],
            },
        },
        "$defs": {
            "Where": {"title": "Where", "type": "object", "properties": {"x": {"type": "number"}}}
        },
    }
    before = repr(mcp_schema)
    out = harmonize_schema(mcp_schema)
    assert repr(mcp_schema) == before  # not modified
    where = {"type": "object", "properties": {"x": {"type": "number"}}}
    assert out == {
        "type": "object",
        "properties": {
            "id": {"type": ["integer", "string"], "default": -1},
            "source": {"type": ["string", "null"]},
            "where": where,
            "many": {"oneOf": [where, {"type": "integer"}], "nullable": True},
        },
    }


def test_any_of_type_lists_merge_into_one_list() -> None:
    # A member that is itself a type list: its kinds join the others', not a list in a list.
    schema = {
        "type": "object",
        "properties": {
            "v": {"anyOf": [{"type": ["string", "integer"]}, {"type": "boolean"}]},
            "w": {"anyOf": [{"type": ["string", "null"]}, {"type": "integer"}, {"type": "null"}]},
        },
    }
    props = harmonize_schema(schema)["properties"]
    assert props["v"] == {"type": ["string", "integer", "boolean"]}
    assert props["w"] == {"type": ["string", "null", "integer"]}


def test_recursive_refs_stop() -> None:
    schema = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    assert harmonize_schema(schema) == {
        "type": "object",
        "properties": {"next": {"type": "object"}},
    }


def test_validation_reads_nullable_and_one_of() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            "o": {"type": "object", "properties": {}, "nullable": True},
        },
    }
    assert validation_schema(schema)["properties"]["o"] == {
        "anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]
    }
    call = ToolCall("f.g", "f", "g", '{"n": 1, "o": null}')
    assert load_arguments(call, schema) == {"n": 1, "o": None}  # 1 matches both members
    with pytest.raises(ToolError, match=r"at \$\.o: 3 is not valid under any of the given"):
        load_arguments(ToolCall("f.g", "f", "g", '{"o": 3}'), schema)


def test_a_schema_changed_in_place_is_validated_as_it_is_now() -> None:
    pytest.importorskip("jsonschema", reason="jsonschema is not installed (harmonia[tools])")
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    call = ToolCall("functions.f", "functions", "f", '{"n": "x"}')
    with pytest.raises(ToolError, match="is not of type 'integer'"):
        load_arguments(call, schema)
    schema["properties"]["n"]["type"] = "string"  # deep inside, the same dict object
    assert load_arguments(call, schema) == {"n": "x"}
    schema["required"] = ["m"]
    with pytest.raises(ToolError, match="'m' is a required property"):
        load_arguments(call, schema)


def test_many_violations_are_listed_and_capped() -> None:
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in "abcde"}}
    call = ToolCall("f.g", "f", "g", '{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}')
    with pytest.raises(ToolError) as info:
        load_arguments(call, schema)
    message = str(info.value)
    assert message.count("is not of type 'string'") == 3 and "(and 2 more)" in message


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Reading:
    colour: Colour
    values: tuple[int, ...]


def test_result_text() -> None:
    assert to_json_text("plain ✓") == "plain ✓"
    assert to_json_text(Reading(Colour.RED, (1, 2))) == '{"colour": "red", "values": [1, 2]}'
    assert to_json_text({"set": frozenset()}) == '{"set": []}'
    assert to_json_text([1.5, None, True]) == "[1.5, null, true]"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, ("", {})),
        ("Just a summary.\n\nMore text.", ("Just a summary.\n\nMore text.", {})),
        (
            "Sum.\n\nParameters\n----------\nx : int\n    The x.\ny\n    The y,\n    twice.\n\n"
            "Returns\n-------\nint\n    Result.",
            ("Sum.", {"x": "The x.", "y": "The y, twice."}),
        ),
        (
            "Sum.\n\nArgs:\n    x (int): The x.\n    **kw: Extra.\n\nRaises:\n    ValueError: bad",
            ("Sum.", {"x": "The x.", "kw": "Extra."}),
        ),
        (
            "Sum.\n\n:param int x: The x\n    continued.\n:type x: int\n:return: y",
            ("Sum.", {"x": "The x continued."}),
        ),
    ],
)
def test_docstrings(doc: str | None, expected: tuple[str, dict[str, Any]]) -> None:
    assert parse_docstring(doc) == expected
