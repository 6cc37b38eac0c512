"""The data model: builders, coercion, and the reference's JSON shapes."""

from __future__ import annotations

import json

import pytest

from harmonia import (
    Author,
    ChannelConfig,
    Conversation,
    DeveloperContent,
    InputError,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
)


def test_system_builders_modify_and_return_the_same_object() -> None:
    s = SystemContent.new()
    assert s.with_reasoning_effort(ReasoningEffort.LOW) is s
    assert s.with_model_identity("I") is s
    assert s.with_conversation_start_date("2025-01-01") is s
    assert s.with_knowledge_cutoff("2021-01") is s
    assert s.with_required_channels(["analysis"]) is s
    assert s.with_channel_config(ChannelConfig(["final"], False)) is s
    assert s.with_browser_tool() is s
    assert s.with_python_tool() is s
    assert s.reasoning_effort is ReasoningEffort.LOW
    assert s.model_identity == "I"
    assert s.conversation_start_date == "2025-01-01"
    assert s.knowledge_cutoff == "2021-01"
    assert s.channel_config == ChannelConfig(valid_channels=["final"], channel_required=False)
    assert s.tools is not None and sorted(s.tools) == ["browser", "python"]


def test_system_defaults() -> None:
    s = SystemContent.new()
    assert s.model_identity == "You are ChatGPT, a large language model trained by OpenAI."
    assert s.reasoning_effort is ReasoningEffort.MEDIUM
    assert s.conversation_start_date is None
    assert s.knowledge_cutoff == "2024-06"
    assert s.channel_config == ChannelConfig.require_channels(["analysis", "commentary", "final"])
    assert s.tools is None
    # each instance has its own channel config
    assert s.channel_config is not SystemContent.new().channel_config


def test_developer_builders() -> None:
    d = DeveloperContent.new()
    tool = ToolDescription.new("f", "d", parameters={"type": "object"})
    assert d.with_instructions("I") is d
    assert d.with_function_tools([tool]) is d
    assert d.tools == {"functions": ToolNamespaceConfig("functions", None, [tool])}
    d.with_function_tools([])  # replaces the previous functions namespace
    assert d.tools == {"functions": ToolNamespaceConfig("functions", None, [])}


def test_message_builders() -> None:
    m = Message.from_role_and_content(Role.ASSISTANT, "x")
    assert m.with_channel("commentary") is m
    assert m.with_recipient("functions.f") is m
    assert m.with_content_type("<|constrain|>json") is m
    assert m.adding_content(TextContent(text="y")) is m
    assert (m.channel, m.recipient, m.content_type) == (
        "commentary",
        "functions.f",
        "<|constrain|>json",
    )
    assert m.content == [TextContent("x"), TextContent("y")]
    assert m.text == "xy"


def test_roles_are_coerced_and_validated() -> None:
    assert Message.from_role_and_content("user", "x").author.role is Role.USER  # type: ignore[arg-type]
    assert Author(role="tool", name="f").role is Role.TOOL  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown role: 'x'"):
        Role("x")
    with pytest.raises(ValueError):
        ReasoningEffort("low")


def test_builtin_tool_configs_are_fresh_objects() -> None:
    a = ToolNamespaceConfig.browser()
    a.tools[0].parameters["properties"]["query"]["type"] = "number"  # type: ignore[index]
    b = ToolNamespaceConfig.browser()
    assert b.tools[0].parameters["properties"]["query"] == {"type": "string"}  # type: ignore[index]
    assert [t.name for t in b.tools] == ["search", "open", "find"]
    assert ToolNamespaceConfig.python().tools == []


REFERENCE_JSON = {
    "messages": [
        {
            "role": "system",
            "name": None,
            "content": [
                {
                    "model_identity": "You are ChatGPT, a large language model trained by OpenAI.",
                    "reasoning_effort": "Medium",
                    "knowledge_cutoff": "2024-06",
                    "channel_config": {
                        "valid_channels": ["analysis", "commentary", "final"],
                        "channel_required": True,
                    },
                    "type": "system_content",
                }
            ],
        },
        {
            "role": "developer",
            "name": None,
            "content": [
                {
                    "instructions": "hi",
                    "tools": {
                        "functions": {
                            "name": "functions",
                            "tools": [
                                {"name": "f", "description": "d", "parameters": {"type": "object"}}
                            ],
                        }
                    },
                    "type": "developer_content",
                }
            ],
        },
        {"role": "user", "name": None, "content": [{"type": "text", "text": "hello"}]},
        {
            "role": "tool",
            "name": "functions.f",
            "content": [{"type": "text", "text": "res"}],
            "channel": "commentary",
            "recipient": "assistant",
            "content_type": "json",
        },
    ]
}


def _reference_conversation() -> Conversation:
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(
                Role.DEVELOPER,
                DeveloperContent.new()
                .with_instructions("hi")
                .with_function_tools([ToolDescription.new("f", "d", {"type": "object"})]),
            ),
            Message.from_role_and_content(Role.USER, "hello"),
            Message.from_author_and_content(Author.new(Role.TOOL, "functions.f"), "res")
            .with_channel("commentary")
            .with_recipient("assistant")
            .with_content_type("json"),
        ]
    )


def test_to_json_writes_the_reference_shape_exactly() -> None:
    conv = _reference_conversation()
    assert json.loads(conv.to_json()) == REFERENCE_JSON
    # key order matters for byte-identical files
    assert conv.to_json() == json.dumps(REFERENCE_JSON)


def test_from_json_reads_the_reference_shape() -> None:
    conv = Conversation.from_json(json.dumps(REFERENCE_JSON))
    assert conv == _reference_conversation()
    assert Conversation.from_dict(REFERENCE_JSON) == conv


def test_message_from_dict_accepts_parse_result_shape() -> None:
    raw = {
        "role": "assistant",
        "recipient": "functions.f",
        "content": '{"a":1}',
        "channel": "commentary",
        "content_type": "<|constrain|>json",
    }
    m = Message.from_dict(raw)
    assert m == Message.from_role_and_content(Role.ASSISTANT, '{"a":1}').with_channel(
        "commentary"
    ).with_recipient("functions.f").with_content_type("<|constrain|>json")


def test_unknown_content_variant() -> None:
    with pytest.raises(InputError, match="Unknown content variant"):
        Message.from_dict({"role": "user", "content": [{"type": "image"}]})
    with pytest.raises(ValueError):
        Message.from_dict({"role": "user", "content": [{"text": "no type"}]})


def test_missing_system_fields_take_defaults_as_in_the_reference() -> None:
    s = SystemContent.from_dict({"type": "system_content"})
    assert s == SystemContent.new()
    s = SystemContent.from_dict({"reasoning_effort": None, "channel_config": None})
    assert s.reasoning_effort is None and s.channel_config is None


def test_from_messages_rejects_non_messages() -> None:
    with pytest.raises(InputError, match="item 1 is a SystemContent"):
        Conversation.from_messages(
            [Message.from_role_and_content(Role.USER, "x"), SystemContent.new()]  # type: ignore[list-item]
        )


def test_response_formats_round_trip_through_json() -> None:
    d = DeveloperContent.new().with_response_format("answer", {"type": "object"}, "desc")
    raw = d.to_dict()
    assert raw["response_formats"] == [
        {"name": "answer", "description": "desc", "schema": {"type": "object"}}
    ]
    assert DeveloperContent.from_dict(raw) == d
    # a second format with the same name replaces the first
    d.with_response_format("answer", {"type": "string"})
    assert len(d.response_formats or []) == 1


def test_conversation_iterates_messages() -> None:
    conv = _reference_conversation()
    assert list(conv) == conv.messages
    assert len(conv) == 4
