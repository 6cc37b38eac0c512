"""Responses API <-> harmony: input items to conversations, output tokens to responses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_helpers import (
    assistant_turn,
    brief,
    developer,
    encode,
    guide_text,
    system,
    valid_response,
)

from harmonia import (
    HarmonyEncoding,
    Message,
    ReasoningEffort,
)
from harmonia.openai_compat import (
    OutputDiagnostic,
    RequestError,
    ToolCallMatchError,
    UnsupportedContentError,
    render_responses_request,
    response_from_tokens,
    responses_request_to_conversation,
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Gets the weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}


def conv_of(request: dict[str, Any]) -> list[Message]:
    return responses_request_to_conversation(request).messages


def fcall(call_id: str, name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        **extra,
    }


def fout(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def reasoning_item(text: str, item_id: str = "rs_1") -> dict[str, Any]:
    """A reasoning item with its text as content (no summary)."""
    content = [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content}


# -- request -> conversation -------------------------------------------------------------------


def test_instructions_and_string_input() -> None:
    messages = conv_of(
        {
            "instructions": "Be brief.",
            "input": [
                {"role": "system", "content": "Be kind."},
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": "Be exact."}],
                },
                {"role": "user", "content": "Hi"},
            ],
        }
    )
    assert developer(messages).instructions == "Be brief.\n\nBe kind.\n\nBe exact."
    assert brief(messages) == [("user", None, None, None, None, "Hi")]
    assert brief(conv_of({"input": "Hello"})) == [("user", None, None, None, None, "Hello")]


def test_non_text_input_is_an_error_with_its_path() -> None:
    request = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "data:,"},
                ],
            }
        ]
    }
    with pytest.raises(UnsupportedContentError) as info:
        conv_of(request)
    assert info.value.path == "input[0].content[1]"


def test_tools() -> None:
    messages = conv_of(
        {
            "input": "Hi",
            "tools": [
                WEATHER,
                {"type": "web_search"},
                {"type": "code_interpreter", "container": {"type": "auto"}},
            ],
        }
    )
    tools = developer(messages).tools
    assert tools is not None and [t.name for t in tools["functions"].tools] == ["get_weather"]
    builtins = system(messages).tools
    assert builtins is not None and sorted(builtins) == ["browser", "python"]
    with pytest.raises(UnsupportedContentError) as info:
        conv_of({"input": "Hi", "tools": [{"type": "file_search", "vector_store_ids": []}]})
    assert info.value.path == "tools[0].type"
    with pytest.raises(RequestError) as info2:
        conv_of({"input": "Hi", "tools": [WEATHER, WEATHER]})
    assert info2.value.path == "tools[1].name"


def test_tool_choice() -> None:
    base = {"input": "Hi", "tools": [WEATHER, {"type": "web_search_preview"}]}
    none = conv_of({**base, "tool_choice": "none"})
    assert len(none) == 2 and system(none).tools is None
    allowed = conv_of(
        {
            **base,
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "web_search_preview"}],
            },
        }
    )
    assert len(allowed) == 2  # no function declared
    assert system(allowed).tools is not None


def test_reasoning_effort_and_text_format(enc: HarmonyEncoding) -> None:
    request = {
        "input": "List",
        "reasoning": {"effort": "minimal", "summary": "auto"},
        "text": {
            "format": {
                "type": "json_schema",
                "name": "shopping_list",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
    }
    messages = conv_of(request)
    assert system(messages).reasoning_effort == ReasoningEffort.LOW
    formats = developer(messages).response_formats
    assert formats is not None and formats[0].name == "shopping_list"
    rendered = enc.decode_utf8(render_responses_request(enc, request))
    assert '# Response Formats\n\n## shopping_list\n\n{"type":"object"}' in rendered
    with pytest.raises(RequestError) as info:
        conv_of({"input": "x", "reasoning": {"effort": "huge"}})
    assert info.value.path == "reasoning.effort"


def test_history_items() -> None:
    request = {
        "input": [
            {"role": "user", "content": "Weather in Tokyo and Paris?"},
            reasoning_item("Two calls."),
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            fcall("a", "get_weather", {"city": "Tokyo"}, id="fc_1"),
            fcall("b", "get_weather", '{"city":"Paris"}', id="fc_2"),
            fout("b", "rain"),
            fout("a", [{"type": "input_text", "text": "sun"}]),
            {
                "type": "message",
                "role": "assistant",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": "Sun and rain.", "annotations": []}],
            },
        ],
        "tools": [WEATHER],
    }
    fn, js = "functions.get_weather", "<|constrain|>json"
    assert brief(conv_of(request)) == [
        ("user", None, None, None, None, "Weather in Tokyo and Paris?"),
        ("assistant", None, "analysis", None, None, "Two calls."),
        ("assistant", None, "commentary", None, None, "Checking."),
        ("assistant", None, "commentary", fn, js, '{"city":"Tokyo"}'),
        ("assistant", None, "commentary", fn, js, '{"city":"Paris"}'),
        ("tool", fn, "commentary", "assistant", None, "sun"),
        ("tool", fn, "commentary", "assistant", None, "rain"),
        ("assistant", None, "final", None, None, "Sun and rain."),
    ]


def test_phase_wins_over_the_heuristic() -> None:
    request = {
        "input": [
            {"role": "assistant", "phase": "commentary", "content": "Working on it."},
            {"role": "assistant", "phase": "final_answer", "content": "Early answer."},
            fcall("a", "f", "{}"),
        ]
    }
    assert [m.channel for m in conv_of(request)[1:]] == ["commentary", "final", "commentary"]


def test_reasoning_summary_is_used_without_content() -> None:
    item = {
        "type": "reasoning",
        "id": "rs",
        "summary": [{"type": "summary_text", "text": "A."}, {"type": "summary_text", "text": "B."}],
    }
    assert conv_of({"input": [item]})[-1].text == "A.\n\nB."
    encrypted = {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "xyz"}
    assert len(conv_of({"input": [encrypted]})) == 1  # nothing harmony can read


def test_builtin_items() -> None:
    request = {
        "input": [
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {"type": "search", "query": "harmony"},
            },
            {
                "type": "web_search_call",
                "id": "ws_2",
                "status": "completed",
                "action": {"type": "open_page", "url": "https://x.org"},
            },
            {
                "type": "web_search_call",
                "id": "ws_3",
                "status": "completed",
                "action": {"type": "find_in_page", "pattern": "gpt", "url": "https://x.org"},
            },
            {
                "type": "code_interpreter_call",
                "id": "ci_1",
                "code": "print(6*7)",
                "container_id": "c",
                "status": "completed",
                "outputs": [{"type": "logs", "logs": "42\n"}],
            },
            fcall("c_1", "search", '{"query":"again"}', namespace="browser"),
            fout("c_1", "[0] results"),
            fcall("c_2", "python", "print(1)"),
        ]
    }
    assert brief(conv_of(request)) == [
        ("assistant", None, "analysis", "browser.search", "code", '{"query":"harmony"}'),
        ("assistant", None, "analysis", "browser.open", "code", '{"id":"https://x.org"}'),
        ("assistant", None, "analysis", "browser.find", "code", '{"pattern":"gpt"}'),
        ("assistant", None, "analysis", "python", "code", "print(6*7)"),
        ("tool", "python", "analysis", "assistant", None, "42\n"),
        ("assistant", None, "analysis", "browser.search", "code", '{"query":"again"}'),
        ("tool", "browser.search", "analysis", "assistant", None, "[0] results"),
        ("assistant", None, "analysis", "python", "code", "print(1)"),
    ]


@pytest.mark.parametrize(
    ("items", "path", "error"),
    [
        ([fout("zz", "x")], "input[0].call_id", ToolCallMatchError),
        ([fcall("a", "f", "{}"), fcall("a", "g", "{}")], "input[1].call_id", ToolCallMatchError),
        (
            [fcall("a", "f", "{}"), fout("a", "1"), fout("a", "2")],
            "input[2].call_id",
            ToolCallMatchError,
        ),
        (
            [{"type": "function_call", "name": "f", "arguments": "{}"}],
            "input[0].call_id",
            RequestError,
        ),
        (
            [{"type": "function_call_output", "call_id": "a"}],
            "input[0].output",
            RequestError,
        ),
        ([fcall("a", "f", 3)], "input[0].arguments", RequestError),
        ([{"type": "item_reference", "id": "msg_1"}], "input[0]", UnsupportedContentError),
        ([{"type": "computer_call", "id": "x"}], "input[0]", UnsupportedContentError),
        ([{"role": "critic", "content": "x"}], "input[0].role", RequestError),
        (
            [{"type": "web_search_call", "id": "w", "action": {"type": "scroll"}}],
            "input[0].action.type",
            UnsupportedContentError,
        ),
    ],
)
def test_item_errors(items: list[Any], path: str, error: type[RequestError]) -> None:
    with pytest.raises(error) as info:
        conv_of({"input": items})
    assert info.value.path == path


# -- output tokens -> response ---------------------------------------------------------------


def response_of(enc: HarmonyEncoding, output: str, **kwargs: Any) -> dict[str, Any]:
    data = response_from_tokens(
        enc, encode(enc, output), model="gpt-oss-120b", ids="s", created_at=3, **kwargs
    )
    valid_response(data)
    return data


def test_guide_outputs(enc: HarmonyEncoding) -> None:
    chat = guide_text("chat_output", joined=True)
    data = response_of(enc, chat)
    reasoning, message = data["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [
        {
            "type": "reasoning_text",
            "text": 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.',
        }
    ]
    assert message["type"] == "message" and message["id"].startswith("msg_")
    assert message["phase"] == "final_answer" and message["status"] == "completed"
    assert message["content"] == [
        {"type": "output_text", "text": "2 + 2 = 4.", "annotations": [], "logprobs": []}
    ]
    assert data["status"] == "completed" and data["incomplete_details"] is None

    preamble = guide_text("preamble_output")
    items = response_of(enc, preamble)["output"]
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call"]
    assert items[1]["phase"] == "commentary"
    assert items[2]["name"] == "generate_file"
    assert json.loads(items[2]["arguments"]) == {"template": "basic_html", "path": "index.html"}
    assert items[2]["call_id"].startswith("call_") and items[2]["id"].startswith("fc_")


BUILTINS = (
    '<|channel|>analysis to=browser.search code<|message|>{"query":"harmony"}<|call|>'
    '<|start|>assistant<|channel|>analysis to=browser.open code<|message|>{"id":"https://x.org"}<|call|>'
    '<|start|>assistant<|channel|>analysis to=browser.find code<|message|>{"pattern":"gpt"}<|call|>'
    "<|start|>assistant<|channel|>analysis to=python code<|message|>print(6*7)<|call|>"
)


def test_builtin_calls_as_function_calls(enc: HarmonyEncoding) -> None:
    items = response_of(enc, BUILTINS)["output"]
    assert [(i["type"], i["name"], i["arguments"]) for i in items] == [
        ("function_call", "browser.search", '{"query":"harmony"}'),
        ("function_call", "browser.open", '{"id":"https://x.org"}'),
        ("function_call", "browser.find", '{"pattern":"gpt"}'),
        ("function_call", "python", "print(6*7)"),
    ]


def test_builtin_calls_as_native_items(enc: HarmonyEncoding) -> None:
    items = response_of(enc, BUILTINS, builtin_calls="native")["output"]
    assert [i["type"] for i in items] == ["web_search_call"] * 3 + ["code_interpreter_call"]
    assert [i["action"] for i in items[:3]] == [
        {"type": "search", "query": "harmony"},
        {"type": "open_page", "url": "https://x.org"},
        {"type": "find_in_page", "pattern": "gpt", "url": ""},
    ]
    assert items[3]["code"] == "print(6*7)" and items[3]["id"].startswith("ci_")
    # ... and they convert back to the same harmony calls.
    conv = responses_request_to_conversation({"input": items})
    assert [m.recipient for m in conv.messages[1:]] == [
        "browser.search",
        "browser.open",
        "browser.find",
        "python",
    ]


def test_diagnostics(enc: HarmonyEncoding) -> None:
    found: list[OutputDiagnostic] = []
    data = response_of(
        enc, "<|channel|>final<|message|>A<|constrain|>B<|return|>", diagnostics=found
    )
    assert data["output"][0]["content"][0]["text"] == "AB"
    assert [d.kind for d in found] == ["special-token-in-content"]


def test_incomplete_response(enc: HarmonyEncoding) -> None:
    data = response_of(enc, "<|channel|>final<|message|>The answer", finished=False)
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "max_output_tokens"}
    assert data["output"][0]["status"] == "incomplete"


def test_request_fields_are_echoed_and_usage(enc: HarmonyEncoding) -> None:
    request = {
        "model": "gpt-oss-120b",
        "input": "Hi",
        "instructions": "Be brief.",
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "temperature": 0.5,
        "reasoning": {"effort": "high"},
        "max_output_tokens": 100,
    }
    data = response_of(
        enc, "<|channel|>final<|message|>Hi<|return|>", request=request, prompt_tokens=9
    )
    for key in (
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "metadata",
        "temperature",
        "max_output_tokens",
    ):
        assert data[key] == request[key], key
    assert data["usage"]["input_tokens"] == 9
    assert data["usage"]["output_tokens"] == data["usage"]["total_tokens"] - 9 > 0


def test_ids_are_deterministic_when_seeded(enc: HarmonyEncoding) -> None:
    tokens = encode(enc, "<|channel|>commentary to=functions.f<|message|>{}<|call|>")
    one = response_from_tokens(enc, tokens, model="m", ids="s")
    two = response_from_tokens(enc, tokens, model="m", ids="s")
    other = response_from_tokens(enc, tokens, model="m", ids="t")
    assert one["id"] == two["id"] != other["id"]
    assert one["output"] == two["output"] != other["output"]


def test_invalid_builtin_calls_mode(enc: HarmonyEncoding) -> None:
    with pytest.raises(ValueError):
        response_from_tokens(enc, [], model="m", builtin_calls="mixed")  # type: ignore[arg-type]


# -- round trip --------------------------------------------------------------------------------


def test_round_trip(enc: HarmonyEncoding) -> None:
    turn = [
        reasoning_item("Two calls."),
        {
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "id": "msg_1",
            "phase": "commentary",
            "content": [{"type": "output_text", "text": "Checking…", "annotations": []}],
        },
        fcall("call_a", "get_weather", {"city": "東京"}, id="fc_a"),
        fcall("call_b", "search", '{"query":"paris weather"}', namespace="browser", id="fc_b"),
    ]
    request = {
        "input": [{"role": "user", "content": "Weather?"}, *turn],
        "tools": [WEATHER, {"type": "web_search"}],
    }
    conv = responses_request_to_conversation(request)
    _, completion = assistant_turn(enc, conv, 3)
    output = response_from_tokens(enc, completion, model="m", ids="x", request=request)
    valid_response(output)
    items = output["output"]
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call"]
    assert items[0]["content"] == turn[0]["content"]
    assert items[1]["content"][0]["text"] == "Checking…" and items[1]["phase"] == "commentary"
    assert (items[2]["name"], json.loads(items[2]["arguments"])) == (
        "get_weather",
        {"city": "東京"},
    )
    assert (items[3]["name"], items[3]["arguments"]) == (
        "browser.search",
        '{"query":"paris weather"}',
    )
    # Ids are not in harmony: new ones are made.
    assert {i["call_id"] for i in items[2:]}.isdisjoint({"call_a", "call_b"})
    # The output items, sent back as input, give the same conversation.
    again = responses_request_to_conversation(
        {**request, "input": [{"role": "user", "content": "Weather?"}, *items]}
    )
    assert again == conv
