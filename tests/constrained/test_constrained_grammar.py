"""The turn grammar as text: what it declares, and what it refuses to build.

These tests need no llguidance: exporting the grammar is pure Python.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from grammar_helpers import WEATHER, conversation

import harmonia as h
from harmonia import (
    ChannelConfig,
    DeveloperContent,
    InputError,
    Message,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from harmonia.constrained import GrammarOptions, build_turn_grammar, grammar_for_llguidance
from harmonia.constrained._grammar import installed_llguidance

#: What the grammar adds for the llguidance installed here (1.9 needs it, 1.7 refuses it).
UNICODE_ESCAPES = (
    {"json_allow_general_unicode_escapes": True} if installed_llguidance() >= (1, 9) else {}
)


def rules(grammar: str) -> dict[str, str]:
    """Rule name -> its text (alternatives joined), comments dropped."""
    out: dict[str, str] = {}
    name = ""
    for line in grammar.splitlines():
        if line.startswith(("//", "%")) or not line.strip():
            continue
        if line.lstrip().startswith("|"):
            out[name] += " " + line.strip()
        else:
            name, _, body = line.partition(": ")
            out[name] = body
    return out


def test_plain_conversation_allows_analysis_preambles_and_a_final_answer() -> None:
    r = rules(build_turn_grammar(conversation(SystemContent.new())))
    assert r["start"] == "(analysis next)* (preamble next)* ending"
    assert r["next"] == '<[200006]> "assistant"'
    assert r["analysis"] == '<[200005]> "analysis" <[200008]> TEXT <[200007]>'
    assert r["preamble"] == '<[200005]> "commentary" <[200008]> TEXT <[200007]>'
    assert r["final"] == '<[200005]> "final" <[200008]> TEXT <[200002]>'
    assert r["ending"] == "final"
    assert r["TEXT"] == "/(?s:.*)/"


def test_function_call_headers_are_the_renderers_and_the_models() -> None:
    grammar = build_turn_grammar(
        conversation(developer=DeveloperContent.new().with_function_tools([WEATHER]))
    )
    r = rules(grammar)
    assert r["ending"] == "final | call_1"
    assert r["call_1"] == (
        '" to=functions.get_weather" <[200005]> "commentary " <[200003]> "json" <[200008]> '
        "args_1 <[200012]> | "
        '<[200005]> "commentary to=functions.get_weather " <[200003]> "json" <[200008]> '
        "args_1 <[200012]>"
    )
    assert "// functions.get_weather" in grammar
    schema = json.loads(r["args_1"].removeprefix("%json "))
    assert schema["properties"] == WEATHER.parameters["properties"]  # type: ignore[index]
    assert schema["x-guidance"] == {
        **UNICODE_ESCAPES,
        "whitespace_pattern": "[\\x20\\x0A\\x0D\\x09]{0,32}",
    }


@pytest.mark.parametrize(("placement", "count"), [("both", 2), ("role", 1), ("channel", 1)])
def test_recipient_placement(placement: str, count: int) -> None:
    options = GrammarOptions(recipient_placement=placement)  # type: ignore[arg-type]
    conv = conversation(developer=DeveloperContent.new().with_function_tools([WEATHER]))
    call = rules(build_turn_grammar(conv, options))["call_1"]
    assert call.count("<[200012]>") == count
    assert ('" to=functions.get_weather" <[200005]>' in call) == (placement != "channel")
    assert ('"commentary to=functions.get_weather "' in call) == (placement != "role")


def test_builtin_tools() -> None:
    r = rules(
        build_turn_grammar(conversation(SystemContent.new().with_browser_tool().with_python_tool()))
    )
    assert r["ending"] == "final | call_1 | call_2 | call_3 | call_4"
    # browser.search: 2 channels x 3 content types x 2 placements
    assert r["call_1"].count("args_1 <[200012]>") == 12
    assert '<[200005]> "analysis to=browser.search code" <[200008]> args_1' in r["call_1"]
    assert (
        '" to=browser.search" <[200005]> "commentary " <[200003]> "json" <[200008]>' in r["call_1"]
    )
    # python: free text, content type code or none
    assert r["call_4"].count("TEXT <[200012]>") == 8
    assert '<[200005]> "analysis to=python code" <[200008]> TEXT <[200012]>' in r["call_4"]
    assert "args_4" not in r


def test_response_format_makes_the_final_answer_json() -> None:
    dev = DeveloperContent.new().with_response_format("a", {"type": "object"})
    dev.with_response_format("b", {"type": "array"})
    r = rules(build_turn_grammar(conversation(developer=dev)))
    assert r["final"] == (
        '<[200005]> "final" <[200008]> final_json <[200002]> | '
        '<[200005]> "final " <[200003]> "json" <[200008]> final_json <[200002]>'
    )
    # Several formats are one %json (anyOf), each format its own resource ($id).
    assert r["final_json"] == "any_format"
    schema = json.loads(r["any_format"].removeprefix("%json "))
    assert [branch["type"] for branch in schema["anyOf"]] == ["object", "array"]
    assert len({branch["$id"] for branch in schema["anyOf"]}) == 2


def test_one_response_format_is_its_own_rule() -> None:
    dev = DeveloperContent.new().with_response_format("a", {"type": "object"})
    r = rules(build_turn_grammar(conversation(developer=dev)))
    assert r["final_json"] == "format_1"
    assert json.loads(r["format_1"].removeprefix("%json "))["type"] == "object"


def test_tool_without_parameters_takes_an_empty_object() -> None:
    tool = ToolDescription.new("now", "The time.")
    r = rules(
        build_turn_grammar(
            conversation(developer=DeveloperContent.new().with_function_tools([tool]))
        )
    )
    schema = json.loads(r["args_1"].removeprefix("%json "))
    assert schema["properties"] == {} and schema["additionalProperties"] is False


def test_options_are_written() -> None:
    options = GrammarOptions(analysis_max_tokens=50, json_max_whitespace=None, lenient_schemas=True)
    grammar = build_turn_grammar(
        conversation(developer=DeveloperContent.new().with_function_tools([WEATHER])), options
    )
    r = rules(grammar)
    assert r["analysis"] == '<[200005]> "analysis" <[200008]> analysis_text <[200007]>'
    assert r["analysis_text[max_tokens=50]"] == "TEXT"
    guidance = json.loads(r["args_1"].removeprefix("%json "))["x-guidance"]
    assert guidance == {**UNICODE_ESCAPES, "lenient": True}


def test_schema_x_guidance_wins() -> None:
    tool = ToolDescription.new(
        "f", "", {"type": "object", "x-guidance": {"whitespace_flexible": False}}
    )
    r = rules(
        build_turn_grammar(
            conversation(developer=DeveloperContent.new().with_function_tools([tool]))
        )
    )
    guidance = json.loads(r["args_1"].removeprefix("%json "))["x-guidance"]
    assert guidance["whitespace_flexible"] is False


@pytest.mark.parametrize(
    ("tool_choice", "ending"),
    [("auto", "final | call_1"), ("required", "call_1"), ("none", "final")],
)
def test_tool_choice(tool_choice: str, ending: str) -> None:
    options = GrammarOptions(tool_choice=tool_choice)  # type: ignore[arg-type]
    conv = conversation(developer=DeveloperContent.new().with_function_tools([WEATHER]))
    assert rules(build_turn_grammar(conv, options))["ending"] == ending


def test_channel_config_removes_messages() -> None:
    system = SystemContent.new().with_channel_config(ChannelConfig.require_channels(["final"]))
    r = rules(build_turn_grammar(conversation(system)))
    assert r["start"] == "ending" and "analysis" not in r and "preamble" not in r


def test_builtin_tools_follow_the_declared_channels() -> None:
    system = SystemContent.new().with_python_tool()
    system.with_channel_config(ChannelConfig.require_channels(["analysis", "final"]))
    call = rules(build_turn_grammar(conversation(system)))["call_1"]
    assert "commentary" not in call and '"analysis to=python"' in call


def test_later_declarations_win() -> None:
    first = DeveloperContent.new().with_function_tools([WEATHER])
    second = DeveloperContent.new().with_function_tools(
        [ToolDescription.new("get_weather", "", {"type": "string"})]
    )
    conv = conversation(developer=first)
    conv.messages.append(Message.from_role_and_content(Role.DEVELOPER, second))
    r = rules(build_turn_grammar(conv))
    assert json.loads(r["args_1"].removeprefix("%json "))["type"] == "string"


def test_other_developer_namespaces_are_tools_too() -> None:
    dev = DeveloperContent.new().with_tools(ToolNamespaceConfig("crm", None, [WEATHER]))
    assert '" to=crm.get_weather"' in build_turn_grammar(conversation(developer=dev))


def test_literals_are_escaped() -> None:
    tool = ToolDescription.new('we"ird\\name', "", None)
    grammar = build_turn_grammar(
        conversation(developer=DeveloperContent.new().with_function_tools([tool]))
    )
    assert '" to=functions.we\\"ird\\\\name"' in grammar


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["two words", "tab\there", "", "x<|end|>"])
def test_tool_names_that_cannot_be_written_in_a_header(name: str) -> None:
    dev = DeveloperContent.new().with_function_tools([ToolDescription.new(name, "")])
    with pytest.raises(InputError, match="cannot be written in a message header"):
        build_turn_grammar(conversation(developer=dev))


def test_function_tools_need_the_commentary_channel() -> None:
    system = SystemContent.new().with_required_channels(["analysis", "final"])
    dev = DeveloperContent.new().with_function_tools([WEATHER])
    with pytest.raises(InputError, match="functions.get_weather .* must be called on commentary"):
        build_turn_grammar(conversation(system, dev))
    # ... unless no tool may be called anyway
    build_turn_grammar(conversation(system, dev), GrammarOptions(tool_choice="none"))


def test_a_turn_must_be_able_to_end() -> None:
    with pytest.raises(InputError, match="could not end"):
        build_turn_grammar(
            conversation(SystemContent.new()), GrammarOptions(tool_choice="required")
        )
    system = SystemContent.new().with_required_channels(["analysis", "commentary"])
    with pytest.raises(InputError, match="could not end"):
        build_turn_grammar(conversation(system))


@pytest.mark.parametrize(
    "schema", [["not", "an", "object"], {"type": "number", "minimum": float("nan")}, {"x": {1, 2}}]
)
def test_schemas_that_are_not_json_objects(schema: object) -> None:
    tool = ToolDescription.new("f", "", schema)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="tool functions.f"):
        build_turn_grammar(
            conversation(developer=DeveloperContent.new().with_function_tools([tool]))
        )


def test_bad_response_format_is_named() -> None:
    dev = DeveloperContent.new().with_response_format(
        "answer", {"type": "number", "maximum": float("inf")}
    )
    with pytest.raises(InputError, match="response format 'answer'"):
        build_turn_grammar(conversation(developer=dev))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"recipient_placement": "header"},
        {"tool_choice": ""},
        {"tool_choice": 3},
        {"analysis_max_tokens": 0},
        {"analysis_max_tokens": True},
        {"json_max_whitespace": -1},
    ],
)
def test_bad_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InputError):
        GrammarOptions(**kwargs)  # type: ignore[arg-type]


def test_input_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        GrammarOptions(tool_choice="")
    assert issubclass(h.InputError, ValueError)


def test_exporting_needs_no_llguidance() -> None:
    code = (
        "import sys; sys.modules['llguidance'] = None\n"
        "import harmonia as h\n"
        "from harmonia.constrained import build_turn_grammar, TurnMatcher, "
        "ConstrainedUnavailableError\n"
        "conv = h.Conversation.from_messages([h.Message.from_role_and_content(h.Role.USER, 'x')])\n"
        "assert build_turn_grammar(conv).startswith('%llguidance')\n"
        "try:\n"
        "    TurnMatcher.from_conversation(conv)\n"
        "except ConstrainedUnavailableError as e:\n"
        "    assert isinstance(e, ImportError) and isinstance(e, h.HarmonyError)\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # The command that installs the extra from this checkout (harmonia is not on the index).
    assert "pip install -e " in out.stdout and "[constrained]'" in out.stdout


def test_grammars_are_cut_to_the_settings_an_llguidance_knows() -> None:
    grammar = build_turn_grammar(
        conversation(developer=DeveloperContent.new().with_function_tools([WEATHER])),
        GrammarOptions(lenient_schemas=True),
    )
    for_17 = grammar_for_llguidance(grammar, "1.7")
    schema = json.loads(rules(for_17)["args_1"].removeprefix("%json "))
    assert schema["x-guidance"] == {
        "whitespace_pattern": "[\\x20\\x0A\\x0D\\x09]{0,32}",
        "lenient": True,
    }
    assert schema["properties"] == WEATHER.parameters["properties"]  # type: ignore[index]
    # Only the %json lines change; a version that knows every setting keeps the text.
    assert [a for a in grammar.splitlines() if "%json" not in a] == [
        b for b in for_17.splitlines() if "%json" not in b
    ]
    assert grammar_for_llguidance(for_17, "1.9.1") == for_17
    assert grammar_for_llguidance(grammar, (1, 9)) == grammar


@pytest.mark.parametrize("version", ["1", "one.seven", "1.6", (0, 9)])
def test_llguidance_versions_are_checked(version: object) -> None:
    with pytest.raises(InputError, match="llguidance"):
        grammar_for_llguidance("start: a", version)  # type: ignore[arg-type]


def test_the_grammar_for_1_7_compiles_here() -> None:
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    from harmonia.constrained import TurnMatcher

    grammar = build_turn_grammar(
        conversation(developer=DeveloperContent.new().with_function_tools([WEATHER]))
    )
    TurnMatcher(grammar_for_llguidance(grammar, "1.7"))


def test_no_preamble_beside_a_structured_answer() -> None:
    # With a response format and no tool, the answer is the JSON alone: Chat shows
    # preambles in content, where they would break the strict output.
    developer = DeveloperContent.new().with_response_format("a", {"type": "object"})
    assert rules(build_turn_grammar(conversation(developer=developer)))["start"] == (
        "(analysis next)* ending"
    )
    with_tool = developer.with_function_tools([WEATHER])
    assert (
        "(preamble next)*" in rules(build_turn_grammar(conversation(developer=with_tool)))["start"]
    )
