"""GrammarOptions.tool_choice: auto, none, required, and one named tool."""

from __future__ import annotations

import pytest

import harmonia as h
from harmonia import (
    Conversation,
    DeveloperContent,
    InputError,
    Message,
    Role,
    SystemContent,
    ToolDescription,
)

pytest.importorskip("llguidance")

from harmonia.constrained import GrammarOptions, TokenRejectedError, TurnMatcher, build_turn_grammar

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    ToolDescription.new("get_weather", "Gets the weather.", CITY),
    ToolDescription.new("get_time", "Gets the time.", CITY),
    ToolDescription.new("auto", "A function unluckily named like a mode."),
]
CONV = Conversation.from_messages(
    [
        Message.from_role_and_content(
            Role.SYSTEM, SystemContent.new().with_browser_tool().with_python_tool()
        ),
        Message.from_role_and_content(
            Role.DEVELOPER, DeveloperContent.new().with_function_tools(TOOLS)
        ),
        Message.from_role_and_content(Role.USER, "Weather and time in Tokyo?"),
    ]
)
FINAL = "<|channel|>final<|message|>Sunny.<|return|>"


def call(recipient: str, args: str = '{"city": "Tokyo"}') -> str:
    ctype = " code" if recipient == "python" else " <|constrain|>json"
    channel = "analysis" if recipient.startswith(("browser", "python")) else "commentary"
    return f"<|channel|>{channel} to={recipient}{ctype}<|message|>{args}<|call|>"


TURNS = {
    "final": FINAL,
    "functions.get_weather": call("functions.get_weather"),
    "functions.get_time": call("functions.get_time"),
    "functions.auto": call("functions.auto", "{}"),
    "browser.open": call("browser.open", '{"id": 1}'),
    "python": call("python", "print(1)"),
}


def accepted(choice: str) -> set[str]:
    """Which of TURNS a matcher with ``tool_choice=choice`` accepts to the end."""
    out = set()
    for name, turn in TURNS.items():
        m = TurnMatcher.from_conversation(CONV, GrammarOptions(tool_choice=choice))
        try:
            m.consume_all(ENC.encode(turn, allowed_special="all"))
        except TokenRejectedError:
            continue
        assert m.is_finished
        out.add(name)
    return out


@pytest.mark.parametrize(
    ("choice", "turns"),
    [
        ("auto", set(TURNS)),
        ("none", {"final"}),
        ("required", set(TURNS) - {"final"}),
        ("functions.get_weather", {"functions.get_weather"}),
        ("get_time", {"functions.get_time"}),  # Chat's bare function name
        ("functions.auto", {"functions.auto"}),
        ("browser.open", {"browser.open"}),
        ("python", {"python"}),
    ],
)
def test_tool_choice_accepts_exactly(choice: str, turns: set[str]) -> None:
    assert accepted(choice) == turns


def test_named_tool_grammar_has_one_ending() -> None:
    grammar = build_turn_grammar(CONV, GrammarOptions(tool_choice="get_weather"))
    assert "ending: call_1\n" in grammar
    assert "to=functions.get_weather" in grammar
    assert "get_time" not in grammar and "\nfinal:" not in grammar


def test_named_tool_still_allows_analysis_and_preambles_first() -> None:
    m = TurnMatcher.from_conversation(CONV, GrammarOptions(tool_choice="get_weather"))
    m.consume_all(
        ENC.encode(
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
            "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
            + call("functions.get_weather"),
            allowed_special="all",
        )
    )
    assert m.is_finished


def test_unknown_tool_is_an_input_error_naming_the_declared_ones() -> None:
    with pytest.raises(InputError, match="get_news.*functions.get_weather"):
        build_turn_grammar(CONV, GrammarOptions(tool_choice="get_news"))
    bare = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
    with pytest.raises(InputError, match="declared: none"):
        build_turn_grammar(bare, GrammarOptions(tool_choice="functions.f"))
