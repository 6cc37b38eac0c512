"""The cheap value key of system and developer contents (``_render.content_key``).

It must say exactly what the JSON key says: renders through it equal renders
through the JSON key (on the reference corpus and on hand-made contents, errors
included), a change anywhere in a content, deep in a schema too, gives new ids,
and every field of the content classes is part of it.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from harmonia import (
    ChannelConfig,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyError,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
    load_harmony_encoding,
)
from harmonia._render import content_key as content_key_module
from harmonia._render import renderer as renderer_module
from harmonia._render.content_key import KEYED_FIELDS, content_key

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "golden" / "reference-corpus.jsonl.gz"


def weather_tool(description: str = "The city") -> ToolDescription:
    return ToolDescription.new(
        "get_weather",
        "Gets the weather.",
        parameters={
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": description},
                "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
                "days": {"type": "integer", "default": 3, "minimum": 1e2},
            },
            "required": ["location"],
        },
    )


def hand_made() -> list[Conversation]:
    system = SystemContent.new().with_reasoning_effort(ReasoningEffort.LOW)
    browser = SystemContent.new().with_tools(ToolNamespaceConfig.browser())
    dated = SystemContent.new().with_conversation_start_date("2025-01-01")
    dated.channel_config = None
    odd = SystemContent.new()
    odd.model_identity = 5  # type: ignore[assignment]
    emoji = weather_tool("\U0001f600 city \ud83d\ude00")
    nan = ToolDescription.new("f", "d", parameters={"type": "number", "default": math.nan})
    dev = (
        DeveloperContent.new()
        .with_instructions("Be brief.")
        .with_function_tools([weather_tool(), ToolDescription.new("noargs", "No arguments.")])
    )
    contents: list[SystemContent | DeveloperContent] = [
        system,
        browser,
        dated,
        odd,
        dev,
        DeveloperContent.new().with_function_tools([emoji]),
        DeveloperContent.new().with_function_tools([nan]),
        DeveloperContent.new().with_instructions(["not", "text"]),  # type: ignore[arg-type]
    ]
    conversations = []
    for content in contents:
        role = Role.SYSTEM if isinstance(content, SystemContent) else Role.DEVELOPER
        message = Message.from_role_and_content(role, content)
        conversations.append(Conversation.from_messages([message]))
    return conversations


def corpus_conversations() -> Iterator[Conversation]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        for line in lines:
            case = json.loads(line)
            if case["kind"] != "render":
                continue
            try:
                conversation = Conversation.from_json(json.dumps(case["conversation"]))
            except HarmonyError:
                continue
            if any(m.author.role in (Role.SYSTEM, Role.DEVELOPER) for m in conversation.messages):
                yield conversation


def outcome(enc: HarmonyEncoding, conversation: Conversation) -> object:
    try:
        return enc.render_conversation_for_completion(conversation, Role.ASSISTANT)
    except HarmonyError as exc:
        return (type(exc).__name__, str(exc))


def test_the_key_names_every_field_of_the_content_classes() -> None:
    for cls, names in KEYED_FIELDS.items():
        assert {f.name for f in dataclasses.fields(cls)} == set(names), cls.__name__


def _renders_agree(conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch) -> None:
    fast_enc = load_harmony_encoding("HarmonyGptOss")
    fast = [outcome(fast_enc, c) for c in conversations]
    keyed = sum(
        content_key(part, False, "reference") is not None  # type: ignore[arg-type]
        for c in conversations
        for m in c.messages
        for part in m.content
        if isinstance(part, SystemContent | DeveloperContent)
    )
    assert keyed >= 5  # the fast key was used, not only the fallback
    monkeypatch.setattr(renderer_module, "content_key", lambda *args: None)
    json_enc = load_harmony_encoding("HarmonyGptOss")
    assert [outcome(json_enc, c) for c in conversations] == fast


def test_renders_through_the_key_equal_renders_through_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conversations = hand_made()
    assert len(conversations) >= 8
    _renders_agree(conversations, monkeypatch)


def test_corpus_renders_through_the_key_equal_renders_through_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not CORPUS.exists():
        pytest.skip(f"the shared reference corpus is not on this machine ({CORPUS})")
    conversations = list(corpus_conversations())
    assert len(conversations) > 500
    _renders_agree(conversations, monkeypatch)


def test_odd_field_types_take_the_json_key() -> None:
    odd = SystemContent.new()
    odd.model_identity = 5  # type: ignore[assignment]
    assert content_key(odd, False, "reference") is None
    config = SystemContent.new()
    config.channel_config = ChannelConfig(["final", 1], True)  # type: ignore[list-item]
    assert content_key(config, False, "reference") is None
    bad = DeveloperContent.new().with_function_tools(
        [ToolDescription.new("f", "d", parameters={"a": object()})]
    )
    assert content_key(bad, False, "reference") is None
    deep: object = {}
    for _ in range(content_key_module.MAX_NESTING):
        deep = {"type": "object", "properties": {"x": deep}}
    nested = DeveloperContent.new().with_function_tools([ToolDescription.new("f", "d", deep)])  # type: ignore[arg-type]
    assert content_key(nested, False, "reference") is None


def test_a_change_deep_in_a_schema_gives_new_ids(enc: HarmonyEncoding) -> None:
    dev = DeveloperContent.new().with_function_tools([weather_tool("The city")])
    conversation = Conversation.from_messages([Message.from_role_and_content(Role.DEVELOPER, dev)])
    before = enc.render_conversation(conversation)
    tools = dev.tools
    assert tools is not None
    parameters = tools["functions"].tools[0].parameters
    assert parameters is not None
    parameters["properties"]["location"]["description"] = "The town"  # in place
    after = enc.render_conversation(conversation)
    assert after != before
    assert "The town" in enc.decode(after) and "The city" not in enc.decode(after)
    system = SystemContent.new()
    conversation = Conversation.from_messages([Message.from_role_and_content(Role.SYSTEM, system)])
    before = enc.render_conversation(conversation)
    assert system.channel_config is not None
    system.channel_config.valid_channels.append("extra")  # in place, one level down
    assert "extra" in enc.decode(enc.render_conversation(conversation))
