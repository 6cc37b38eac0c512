"""Every prompt example in the harmony guide, rendered and compared byte for byte.

The golden files in ``golden/guide/`` are the guide's code blocks verbatim (only
the newline before each closing fence is not part of the example). Where the
guide and the reference library differ, the test says which one we follow and
why: the model-serving ecosystem feeds gpt-oss what the reference renders.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harmonia import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
)
from tool_examples import SHOPPING_LIST, guide_tool_descriptions

GOLDEN = Path(__file__).parent.parent / "golden" / "guide"


def golden(name: str) -> str:
    return (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")


def system(effort: ReasoningEffort = ReasoningEffort.HIGH) -> SystemContent:
    return (
        SystemContent.new().with_reasoning_effort(effort).with_conversation_start_date("2025-06-28")
    )


WEATHER_TOOLS = guide_tool_descriptions()


def functions_conversation() -> list[Message]:
    dev = (
        DeveloperContent.new()
        .with_instructions("Use a friendly tone.")
        .with_function_tools(WEATHER_TOOLS)
    )
    return [
        Message.from_role_and_content(Role.SYSTEM, system()),
        Message.from_role_and_content(Role.DEVELOPER, dev),
        Message.from_role_and_content(Role.USER, "What is the weather like in SF?"),
    ]


def text_of(enc: HarmonyEncoding, tokens: list[int]) -> str:
    return enc.decode_utf8(tokens)


def assert_exact(enc: HarmonyEncoding, tokens: list[int], expected_text: str) -> None:
    assert text_of(enc, tokens) == expected_text
    # token-exact too: these examples tokenise the same piecewise and whole
    assert tokens == enc.encode(expected_text, allowed_special="all")


def test_system_message_basic(enc: HarmonyEncoding) -> None:
    msg = Message.from_role_and_content(Role.SYSTEM, system())
    assert_exact(enc, enc.render(msg), golden("system_basic"))


def test_system_message_with_functions(enc: HarmonyEncoding) -> None:
    # The functions line is written when a developer message declares functions.
    conv = Conversation.from_messages(functions_conversation()[:2])
    tokens = enc.render_conversation(conv)
    system_part = tokens[: tokens.index(200007) + 1]
    assert_exact(enc, system_part, golden("system_functions"))


def test_function_definitions_prompt(enc: HarmonyEncoding) -> None:
    conv = Conversation.from_messages(functions_conversation())
    tokens = enc.render_conversation_for_completion(conv, Role.ASSISTANT)
    assert_exact(enc, tokens, golden("functions_prompt"))


def test_tool_result_message(enc: HarmonyEncoding) -> None:
    msg = (
        Message.from_author_and_content(
            Author.new(Role.TOOL, "functions.get_current_weather"),
            '{"sunny": true, "temperature": 20}',
        )
        .with_recipient("assistant")
        .with_channel("commentary")
    )
    assert_exact(enc, enc.render(msg), golden("tool_result"))


def test_prompt_after_tool_call_puts_recipient_in_role_part(enc: HarmonyEncoding) -> None:
    """Guide: ``<|channel|>commentary to=functions.x``; reference: ``assistant to=functions.x``.

    We follow the reference (what deployed servers feed gpt-oss); the parser reads
    both forms. Everything else in the example is identical.
    """
    messages = [
        *functions_conversation(),
        Message.from_role_and_content(
            Role.ASSISTANT, "Need to use function get_current_weather."
        ).with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, '{"location":"San Francisco"}')
        .with_channel("commentary")
        .with_recipient("functions.get_current_weather")
        .with_content_type("<|constrain|>json"),
        Message.from_author_and_content(
            Author.new(Role.TOOL, "functions.get_current_weather"),
            '{"sunny": true, "temperature": 20}',
        )
        .with_recipient("assistant")
        .with_channel("commentary"),
    ]
    tokens = enc.render_conversation_for_completion(
        Conversation.from_messages(messages), Role.ASSISTANT
    )
    guide = golden("functions_prompt_after_call")
    guide_header = (
        "<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json"
    )
    reference_header = (
        "<|start|>assistant to=functions.get_current_weather<|channel|>commentary <|constrain|>json"
    )
    assert guide.count(guide_header) == 1
    assert text_of(enc, tokens) == guide.replace(guide_header, reference_header)


def test_structured_output_prompt(enc: HarmonyEncoding) -> None:
    """``# Response Formats`` (a harmonia extension) renders as the guide shows.

    The guide ends the example with a presentational blank line after
    ``<|start|>assistant``; a prompt has nothing after the role.
    """
    dev = (
        DeveloperContent.new()
        .with_instructions("You are a helpful shopping assistant")
        .with_response_format("shopping_list", SHOPPING_LIST)
    )
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.DEVELOPER, dev),
            Message.from_role_and_content(Role.USER, "I need to buy coffee, soda and eggs"),
        ]
    )
    tokens = enc.render_conversation_for_completion(conv, Role.ASSISTANT)
    guide = golden("structured_output_prompt")
    assert guide.endswith("<|start|>assistant\n")
    assert text_of(enc, tokens) == guide[:-1]


def test_response_format_with_description(enc: HarmonyEncoding) -> None:
    dev = DeveloperContent.new().with_response_format(
        "answer",
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        "The answer.\nOnly JSON.",
    )
    text = text_of(enc, enc.render(Message.from_role_and_content(Role.DEVELOPER, dev)))
    assert text == (
        "<|start|>developer<|message|># Response Formats\n\n## answer\n\n"
        "// The answer.\n// Only JSON.\n"
        '{"type":"object","properties":{"n":{"type":"integer"}}}<|end|>'
    )


@pytest.mark.parametrize(
    ("name", "builder"),
    [
        ("system_browser", lambda s: s.with_browser_tool()),
        ("system_python", lambda s: s.with_python_tool()),
    ],
)
def test_builtin_tool_system_messages(enc: HarmonyEncoding, name: str, builder: object) -> None:
    msg = Message.from_role_and_content(Role.SYSTEM, builder(system()))  # type: ignore[operator]
    assert_exact(enc, enc.render(msg), golden(name))


def test_chat_input_has_no_separators_between_messages(enc: HarmonyEncoding) -> None:
    """The guide puts a newline between messages for display; nothing is rendered there."""
    conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "What is 2 + 2?")])
    tokens = enc.render_conversation_for_completion(conv, Role.ASSISTANT)
    assert (
        golden("chat_input") == "<|start|>user<|message|>What is 2 + 2?<|end|>\n<|start|>assistant"
    )
    assert text_of(enc, tokens) == golden("chat_input").replace("\n", "")
    assert tokens == [
        200006,
        1428,
        200008,
        4827,
        382,
        220,
        17,
        659,
        220,
        17,
        30,
        200007,
        200006,
        173781,
    ]


def test_next_input_drops_the_previous_cot(enc: HarmonyEncoding) -> None:
    """The guide's "Handling reasoning output" example, with its display newlines removed."""
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.USER, "What is 2 + 2?"),
            Message.from_role_and_content(
                Role.ASSISTANT, 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.'
            ).with_channel("analysis"),
            Message.from_role_and_content(Role.ASSISTANT, "2 + 2 = 4.").with_channel("final"),
            Message.from_role_and_content(Role.USER, "What about 9 / 2?"),
        ]
    )
    tokens = enc.render_conversation_for_completion(conv, Role.ASSISTANT)
    assert text_of(enc, tokens) == golden("cot_dropped_next_input").replace("<|end|>\n", "<|end|>")
