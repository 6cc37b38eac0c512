"""Bad tool declarations are refused with an error naming the field.

Before: names None, "" and "get weather" rendered as `type None`, `type  =`,
`type get weather`; a nonsense schema rendered as `any`; a lower-case reasoning
effort failed only at render time with AttributeError.
"""

from __future__ import annotations

from typing import Any

import pytest

from harmonia import (
    Conversation,
    DeveloperContent,
    InputError,
    Message,
    ReasoningEffort,
    RenderConversationConfig,
    RenderError,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)


def render_tools(enc: Any, tools: list[ToolDescription], namespace: str = "functions") -> Any:
    content = DeveloperContent.new().with_tools(ToolNamespaceConfig(namespace, None, tools))
    return enc.render(Message.from_role_and_content(Role.DEVELOPER, content))


@pytest.mark.parametrize("field", ["name", "description"])
def test_a_tool_without_a_string_name_is_refused_when_built(field: str) -> None:
    values = {"name": "f", "description": "d", field: None}
    with pytest.raises(
        InputError, match=rf"ToolDescription\.{field} must be a string, not NoneType"
    ):
        ToolDescription.new(**values)


@pytest.mark.parametrize("name", ["", "get weather", " f", "f\n", "a\tb"])
def test_a_tool_name_that_cannot_be_declared_is_refused(enc: Any, name: str) -> None:
    tools = [ToolDescription.new("ok", "d"), ToolDescription.new(name, "d", {"type": "object"})]
    with pytest.raises(RenderError, match="cannot be declared") as info:
        render_tools(enc, tools)
    assert info.value.path == "content[0].tools.functions.tools[1].name"
    assert repr(name) in str(info.value)


def test_a_namespace_name_that_cannot_be_declared_is_refused(enc: Any) -> None:
    with pytest.raises(RenderError, match="tool namespace name 'my tools'") as info:
        render_tools(enc, [ToolDescription.new("f", "d")], namespace="my tools")
    assert info.value.path == "content[0].tools.my tools.name"


def test_ordinary_names_still_render(enc: Any) -> None:
    ids = render_tools(enc, [ToolDescription.new("get-weather.v2", "d")])
    assert "type get-weather.v2 = () => any;" in enc.decode_utf8(ids)


@pytest.mark.parametrize(
    ("schema", "path", "says"),
    [
        ({"type": "objekt", "properties": 5}, ".type", "'type' is 'objekt', not a JSON Schema"),
        ({"type": "object", "properties": 5}, ".properties", "'properties' must be an object"),
        ({"properties": {"a": "string"}}, ".properties.a", "must be an object or a boolean"),
        ({"type": ["string", "text"]}, ".type", "'type' is 'text'"),
        ({"type": []}, ".type", "'type' is []"),
        ({"type": "object", "required": "a"}, ".required", "'required' must be a list"),
        ({"type": "array", "items": {"type": 5}}, ".items.type", "'type' is 5"),
        ({"anyOf": {"type": "string"}}, ".anyOf", "'anyOf' must be a list of schemas"),
        ({"oneOf": [{"type": "string"}, 3]}, ".oneOf[1]", "must be an object or a boolean"),
        ({"enum": "abc"}, ".enum", "'enum' must be a list"),
        ({"$ref": 3}, ".$ref", "'$ref' must be a string"),
        ({"$defs": {"A": {"type": "int"}}}, ".$defs.A.type", "'type' is 'int'"),
        ("string", "", "must be an object or a boolean, not the string 'string'"),
    ],
)
@pytest.mark.parametrize("mode", ["reference", "corrected"])
def test_a_nonsense_schema_is_refused_with_its_path(
    enc: Any, schema: Any, path: str, says: str, mode: str
) -> None:
    tool = ToolDescription.new("f", "d", schema)
    content = DeveloperContent.new().with_function_tools([tool])
    conv = Conversation.from_messages([Message.from_role_and_content(Role.DEVELOPER, content)])
    with pytest.raises(RenderError) as info:
        enc.render_conversation(conv, RenderConversationConfig(typescript=mode))
    assert says in info.value.reason
    assert info.value.path == "content[0].tools.functions.tools[0].parameters" + path


def test_a_nonsense_response_format_is_refused(enc: Any) -> None:
    content = DeveloperContent.new().with_response_format("r", {"type": "dict"})
    with pytest.raises(RenderError, match="'type' is 'dict'") as info:
        enc.render(Message.from_role_and_content(Role.DEVELOPER, content))
    assert info.value.path == "content[0].response_formats[0].schema.type"


@pytest.mark.parametrize(
    "schema",
    [
        {},
        True,
        {"type": "null"},
        {"type": ["string", "null"], "x-custom": {"type": "whatever"}},
        {"type": "object", "properties": {"a": True, "b": {"not": {"type": "string"}}}},
        {"anyOf": [], "const": 1, "description": 5},
    ],
)
def test_valid_schemas_are_not_refused(enc: Any, schema: Any) -> None:
    assert render_tools(enc, [ToolDescription.new("f", "d", schema)])


@pytest.mark.parametrize("value", ["high", "High", "HIGH", ReasoningEffort.HIGH])
def test_reasoning_effort_accepts_its_name_in_any_case(enc: Any, value: Any) -> None:
    content = SystemContent.new().with_reasoning_effort(value)
    assert content.reasoning_effort is ReasoningEffort.HIGH
    text = enc.decode_utf8(enc.render(Message.from_role_and_content(Role.SYSTEM, content)))
    assert "\n\nReasoning: high\n\n" in text


@pytest.mark.parametrize("value", ["extreme", 3, ""])
def test_an_unknown_reasoning_effort_is_refused_when_set(value: Any) -> None:
    with pytest.raises(InputError, match="reasoning_effort must be a ReasoningEffort or one of"):
        SystemContent.new().with_reasoning_effort(value)
    with pytest.raises(InputError, match="reasoning_effort must be"):
        SystemContent.from_dict({"reasoning_effort": value})
