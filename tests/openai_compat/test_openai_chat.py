"""Chat Completions <-> harmony: requests to conversations, output tokens to completions."""

from __future__ import annotations

import copy
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
    valid_completion,
)

import harmonia
from harmonia import (
    HarmonyEncoding,
    Message,
    ReasoningEffort,
    Role,
)
from harmonia.openai_compat import (
    OutputDiagnostic,
    PromptOptions,
    RequestError,
    ToolCallMatchError,
    UnsupportedContentError,
    chat_completion_from_tokens,
    chat_request_to_conversation,
    render_chat_request,
)
from tool_examples import SHOPPING_LIST, chat_weather_tool, guide_chat_tools

WEATHER = chat_weather_tool()
TIME = {"type": "function", "function": {"name": "get_time", "description": "Gets the time."}}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conv_of(request: dict[str, Any], options: PromptOptions | None = None) -> list[Message]:
    return chat_request_to_conversation(request, options).messages


def text(enc: HarmonyEncoding, tokens: list[int]) -> str:
    return enc.decode_utf8(tokens)


# -- the guide's examples, through the Chat API ---------------------------------------------

GUIDE_TOOLS = guide_chat_tools()


def test_guide_function_calling_prompt_from_a_chat_request(enc: HarmonyEncoding) -> None:
    request = {
        "messages": [
            {"role": "system", "content": "Use a friendly tone."},
            {"role": "user", "content": "What is the weather like in SF?"},
            {
                "role": "assistant",
                "reasoning_content": "Need to use function get_current_weather.",
                "content": None,
                "tool_calls": [
                    call("call_1", "get_current_weather", {"location": "San Francisco"})
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": '{"sunny": true, "temperature": 20}',
            },
        ],
        "tools": GUIDE_TOOLS,
        "reasoning_effort": "high",
    }
    options = PromptOptions(conversation_start_date="2025-06-28")
    rendered = text(enc, render_chat_request(enc, request, options))
    guide = guide_text("functions_prompt_after_call")
    # The guide writes the recipient after the channel; the reference library (and
    # harmonia) before it. The model reads both.
    to = " to=functions.get_current_weather"
    guide = guide.replace(
        f"<|start|>assistant<|channel|>commentary{to} <|constrain|>json",
        f"<|start|>assistant{to}<|channel|>commentary <|constrain|>json",
    )
    assert rendered == guide


def test_guide_structured_output_prompt(enc: HarmonyEncoding) -> None:
    schema = SHOPPING_LIST
    request = {
        "messages": [
            {"role": "developer", "content": "You are a helpful shopping assistant"},
            {"role": "user", "content": "I need to buy coffee, soda and eggs"},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "shopping_list", "schema": schema, "strict": True},
        },
    }
    rendered = text(enc, render_chat_request(enc, request))
    guide = guide_text("structured_output_prompt")
    assert rendered.endswith(guide.rstrip("\n"))


def test_guide_cot_is_dropped_after_a_final_answer(enc: HarmonyEncoding) -> None:
    request = {
        "messages": [
            {"role": "user", "content": "What is 2 + 2?"},
            {
                "role": "assistant",
                "reasoning_content": 'User asks: "What is 2 + 2?" Simple arithmetic.',
                "content": "2 + 2 = 4.",
            },
            {"role": "user", "content": "What about 9 / 2?"},
        ]
    }
    rendered = text(enc, render_chat_request(enc, request))
    guide = guide_text("cot_dropped_next_input")
    assert rendered.endswith(guide.replace("\n", ""))
    kept = text(enc, render_chat_request(enc, request, cot_policy="keep_all"))
    assert "Simple arithmetic" in kept


def test_reasoning_of_the_turn_in_progress_is_kept(enc: HarmonyEncoding) -> None:
    request = {
        "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "reasoning_content": "old thought", "content": "A1"},
            {"role": "user", "content": "Q2"},
            {
                "role": "assistant",
                "reasoning_content": "new thought",
                "tool_calls": [call("c", "get_time", "{}")],
            },
            {"role": "tool", "tool_call_id": "c", "content": "noon"},
        ],
        "tools": [TIME],
    }
    rendered = text(enc, render_chat_request(enc, request))
    assert "new thought" in rendered
    assert "old thought" not in rendered


# -- system, developer, tools, formats, effort ------------------------------------------------


def test_system_and_developer_messages_become_one_developer_instruction() -> None:
    messages = conv_of(
        {
            "messages": [
                {"role": "system", "content": "First."},
                {"role": "developer", "content": [{"type": "text", "text": "Second."}]},
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": "Third."},
            ]
        }
    )
    assert developer(messages).instructions == "First.\n\nSecond.\n\nThird."
    assert [m.author.role for m in messages] == [Role.SYSTEM, Role.DEVELOPER, Role.USER]


def test_no_developer_message_when_there_is_nothing_to_say() -> None:
    messages = conv_of({"messages": [{"role": "user", "content": "Hi"}]})
    assert [m.author.role for m in messages] == [Role.SYSTEM, Role.USER]


def test_text_parts_are_joined() -> None:
    messages = conv_of(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hello, "},
                        {"type": "text", "text": "you"},
                    ],
                }
            ]
        }
    )
    assert messages[-1].text == "Hello, you"


def test_an_image_part_is_an_error_naming_its_path() -> None:
    request = {
        "messages": [
            {"role": "user", "content": "Look"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "this:"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                ],
            },
        ]
    }
    with pytest.raises(UnsupportedContentError) as info:
        chat_request_to_conversation(request)
    assert info.value.path == "messages[1].content[1]"
    assert "image_url" in str(info.value)
    assert isinstance(info.value, harmonia.InputError)
    assert isinstance(info.value, ValueError)


def test_tools_become_the_functions_namespace(enc: HarmonyEncoding) -> None:
    messages = conv_of({"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER, TIME]})
    tools = developer(messages).tools
    assert tools is not None
    names = [t.name for t in tools["functions"].tools]
    assert names == ["get_weather", "get_time"]
    assert tools["functions"].tools[1].parameters is None
    rendered = text(enc, render_chat_request(enc, {"messages": [], "tools": [WEATHER]}))
    assert "type get_weather = (_: {\ncity: string,\n}) => any;" in rendered
    assert "Calls to these tools must go to the commentary channel: 'functions'." in rendered


@pytest.mark.parametrize(
    ("tools", "path"),
    [
        ([WEATHER, WEATHER], "tools[1].function.name"),
        ([{"type": "function", "function": {"name": "bad name"}}], "tools[0].function.name"),
        ([{"type": "custom", "custom": {"name": "x"}}], "tools[0].type"),
        ([{"type": "function"}], "tools[0].function"),
        ([{"type": "function", "function": {"name": "f", "parameters": [1]}}], None),
    ],
)
def test_bad_tools_are_errors(tools: list[Any], path: str | None) -> None:
    with pytest.raises(RequestError) as info:
        chat_request_to_conversation({"messages": [], "tools": tools})
    if path is not None:
        assert info.value.path == path


def test_tool_choice(enc: HarmonyEncoding) -> None:
    base = {"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER, TIME]}
    none = conv_of({**base, "tool_choice": "none"})
    assert len(none) == 2  # no developer message: no tools declared
    allowed = conv_of(
        {
            **base,
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "get_time"}}],
                },
            },
        }
    )
    tools = developer(allowed).tools
    assert tools is not None
    assert [t.name for t in tools["functions"].tools] == ["get_time"]
    named = {"type": "function", "function": {"name": "get_time"}}
    assert len(conv_of({**base, "tool_choice": named})) == 3
    with pytest.raises(RequestError, match="unknown tool"):
        conv_of({**base, "tool_choice": {"type": "function", "function": {"name": "nope"}}})


def test_response_formats() -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "description": "The answer.",
            "schema": {"type": "object"},
        },
    }
    formats = developer(conv_of({"messages": [], "response_format": fmt})).response_formats
    assert formats is not None
    assert (formats[0].name, formats[0].description, formats[0].schema) == (
        "answer",
        "The answer.",
        {"type": "object"},
    )
    json_object = conv_of({"messages": [], "response_format": {"type": "json_object"}})
    formats = developer(json_object).response_formats
    assert formats is not None and formats[0].name == "json_object"
    assert len(conv_of({"messages": [], "response_format": {"type": "text"}})) == 1
    with pytest.raises(RequestError) as info:
        conv_of({"messages": [], "response_format": {"type": "json_schema", "json_schema": {}}})
    assert info.value.path == "response_format.json_schema.name"


@pytest.mark.parametrize(
    ("effort", "expected"),
    [
        ("low", ReasoningEffort.LOW),
        ("medium", ReasoningEffort.MEDIUM),
        ("high", ReasoningEffort.HIGH),
        ("minimal", ReasoningEffort.LOW),
        ("HIGH", ReasoningEffort.HIGH),
        (None, ReasoningEffort.MEDIUM),
    ],
)
def test_reasoning_effort(effort: str | None, expected: ReasoningEffort) -> None:
    messages = conv_of({"messages": [], "reasoning_effort": effort})
    assert system(messages).reasoning_effort == expected


def test_reasoning_effort_errors_and_fallbacks() -> None:
    with pytest.raises(RequestError) as info:
        conv_of({"messages": [], "reasoning_effort": "extreme"})
    assert info.value.path == "reasoning_effort"
    responses_style = conv_of({"messages": [], "reasoning": {"effort": "high"}})
    assert system(responses_style).reasoning_effort == ReasoningEffort.HIGH
    default = conv_of({"messages": []}, PromptOptions(reasoning_effort="low"))
    assert system(default).reasoning_effort == ReasoningEffort.LOW


def test_prompt_options_set_identity_dates_and_builtin_tools() -> None:
    options = PromptOptions(
        model_identity="You are Harmonia.",
        conversation_start_date="2025-01-02",
        knowledge_cutoff="2024-10",
        builtin_tools=("browser", "python"),
    )
    content = system(conv_of({"messages": []}, options))
    assert content.model_identity == "You are Harmonia."
    assert content.conversation_start_date == "2025-01-02"
    assert content.knowledge_cutoff == "2024-10"
    assert content.tools is not None and sorted(content.tools) == ["browser", "python"]
    with pytest.raises(RequestError):
        PromptOptions(builtin_tools=("shell",))


# -- assistant history -----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning", "thinking"])
def test_reasoning_spellings(key: str) -> None:
    messages = conv_of(
        {
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", key: "R", "content": "A"},
            ]
        }
    )
    assert brief(messages)[1:] == [
        ("assistant", None, "analysis", None, None, "R"),
        ("assistant", None, "final", None, None, "A"),
    ]


def test_reasoning_given_twice() -> None:
    same = {"role": "assistant", "reasoning": "R", "reasoning_content": "R", "content": "A"}
    assert len(conv_of({"messages": [same]})) == 3
    differ = {"role": "assistant", "reasoning": "R", "thinking": "S", "content": "A"}
    with pytest.raises(RequestError) as info:
        conv_of({"messages": [differ]})
    assert info.value.path == "messages[0].thinking"
    with pytest.raises(RequestError):
        conv_of({"messages": [{"role": "assistant", "reasoning": {"text": "R"}}]})


def test_several_tool_calls_results_out_of_order() -> None:
    request = {
        "messages": [
            {"role": "user", "content": "Weather in Tokyo and Paris, and the time?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    call("a", "get_weather", {"city": "Tokyo"}),
                    call("b", "get_weather", '{"city": "Paris"}'),
                    call("c", "get_time", ""),
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "noon"},
            {"role": "tool", "tool_call_id": "a", "content": "sunny"},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "rain"}]},
        ],
        "tools": [WEATHER, TIME],
    }
    original = copy.deepcopy(request)
    messages = conv_of(request)
    weather = "functions.get_weather"
    json_ct = "<|constrain|>json"
    assert brief(messages)[1:] == [
        ("assistant", None, "commentary", None, None, "Let me check."),
        ("assistant", None, "commentary", weather, json_ct, '{"city":"Tokyo"}'),
        ("assistant", None, "commentary", weather, json_ct, '{"city": "Paris"}'),
        ("assistant", None, "commentary", "functions.get_time", json_ct, "{}"),
        ("tool", weather, "commentary", "assistant", None, "sunny"),
        ("tool", weather, "commentary", "assistant", None, "rain"),
        ("tool", "functions.get_time", "commentary", "assistant", None, "noon"),
    ]
    assert request == original  # the request is not modified


def test_arguments_are_never_double_encoded() -> None:
    args = {"q": 'naïve "quotes"', "n": [1, 2]}
    as_object = conv_of({"messages": [{"role": "assistant", "tool_calls": [call("a", "f", args)]}]})
    as_string = conv_of(
        {"messages": [{"role": "assistant", "tool_calls": [call("a", "f", json.dumps(args))]}]}
    )
    double = conv_of(
        {
            "messages": [
                {"role": "assistant", "tool_calls": [call("a", "f", json.dumps(json.dumps(args)))]}
            ]
        }
    )
    assert json.loads(as_object[-1].text) == args
    assert as_string[-1].text == json.dumps(args)  # kept byte for byte
    assert double[-1].text == json.dumps(args)


def test_bad_arguments_name_their_path() -> None:
    request = {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "tool_calls": [call("a", "f", 42)]},
        ]
    }
    with pytest.raises(RequestError) as info:
        conv_of(request)
    assert info.value.path == "messages[3].tool_calls[0].function.arguments"
    assert "messages[3].tool_calls[0].function.arguments" in str(info.value)


def test_invalid_json_arguments_are_kept_as_the_model_wrote_them() -> None:
    messages = conv_of(
        {"messages": [{"role": "assistant", "tool_calls": [call("a", "f", '{"a":')]}]}
    )
    assert messages[-1].text == '{"a":'


@pytest.mark.parametrize(
    ("messages", "path", "error"),
    [
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id", RequestError),
        (
            [{"role": "tool", "tool_call_id": "z", "content": "x"}],
            "messages[0].tool_call_id",
            ToolCallMatchError,
        ),
        (
            [
                {"role": "assistant", "tool_calls": [call("a", "f", "{}")]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "2"},
            ],
            "messages[2].tool_call_id",
            ToolCallMatchError,
        ),
        (
            [{"role": "assistant", "tool_calls": [call("a", "f", "{}"), call("a", "g", "{}")]}],
            "messages[0].tool_calls[1].id",
            ToolCallMatchError,
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f"}}],
                }
            ],
            "messages[0].tool_calls[0].id",
            RequestError,
        ),
        (
            [{"role": "function", "name": "f", "content": "x"}],
            "messages[0].role",
            UnsupportedContentError,
        ),
        (
            [{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}],
            "messages[0].function_call",
            UnsupportedContentError,
        ),
        ([{"role": "robot", "content": "x"}], "messages[0].role", RequestError),
        ([["not", "an", "object"]], "messages[0]", RequestError),
    ],
)
def test_tool_call_matching_errors(
    messages: list[Any], path: str, error: type[RequestError]
) -> None:
    with pytest.raises(error) as info:
        conv_of({"messages": messages})
    assert info.value.path == path


def test_a_call_without_result_is_allowed() -> None:
    messages = conv_of({"messages": [{"role": "assistant", "tool_calls": [call("a", "f", "{}")]}]})
    assert messages[-1].recipient == "functions.f"


def test_preamble_or_final_answer() -> None:
    messages = conv_of(
        {
            "messages": [
                {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "I will look it up."},
                {"role": "assistant", "tool_calls": [call("a", "f", "{}")]},
                {"role": "tool", "tool_call_id": "a", "content": "42"},
                {"role": "assistant", "content": "It is 42."},
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "refusal": "I can't."},
            ]
        }
    )
    channels = [(m.channel, m.text) for m in messages if m.author.role is Role.ASSISTANT]
    assert channels == [
        ("commentary", "I will look it up."),
        ("commentary", "{}"),
        ("final", "It is 42."),
        ("final", "I can't."),
    ]


def test_builtin_tool_calls_in_history() -> None:
    request = {
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [
                    call("a", "browser.search", {"query": "harmony"}),
                    call("b", "python", "print(1)"),
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "[0] results"},
            {"role": "tool", "tool_call_id": "b", "content": "1"},
        ]
    }
    assert brief(conv_of(request)) == [
        ("assistant", None, "analysis", "browser.search", "code", '{"query":"harmony"}'),
        ("assistant", None, "analysis", "python", "code", "print(1)"),
        ("tool", "browser.search", "analysis", "assistant", None, "[0] results"),
        ("tool", "python", "analysis", "assistant", None, "1"),
    ]
    declared = {**request, "tools": [{"type": "function", "function": {"name": "python"}}]}
    assert conv_of(declared)[-3].recipient == "functions.python"


# -- output tokens -> chat.completion -------------------------------------------------------


def completion_of(enc: HarmonyEncoding, output: str, **kwargs: Any) -> dict[str, Any]:
    data = chat_completion_from_tokens(
        enc, encode(enc, output), model="gpt-oss-120b", ids="seed", created=1, **kwargs
    )
    valid_completion(data)
    return data


def test_guide_chat_output(enc: HarmonyEncoding) -> None:
    output = guide_text("chat_output", joined=True)
    data = completion_of(enc, output)
    assert data["choices"][0] == {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": "2 + 2 = 4.",
            "refusal": None,
            "reasoning_content": 'User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.',
        },
        "finish_reason": "stop",
        "logprobs": None,
    }
    assert data["object"] == "chat.completion"
    assert data["id"].startswith("chatcmpl-")


def test_guide_tool_call_output(enc: HarmonyEncoding) -> None:
    output = guide_text("tool_call_output")
    choice = completion_of(enc, output)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == "Need to use function get_current_weather."
    [tool_call] = message["tool_calls"]
    assert tool_call["function"] == {
        "name": "get_current_weather",
        "arguments": '{"location":"San Francisco"}',
    }
    assert tool_call["type"] == "function" and tool_call["id"].startswith("call_")


def test_guide_preamble_is_content(enc: HarmonyEncoding) -> None:
    output = guide_text("preamble_output")
    message = completion_of(enc, output)["choices"][0]["message"]
    assert message["content"].startswith("**Action plan**:")
    assert message["content"].endswith("Will start executing the plan step by step")
    assert message["tool_calls"][0]["function"]["name"] == "generate_file"


def test_several_calls_in_one_output_keep_all_with_unique_ids(enc: HarmonyEncoding) -> None:
    output = (
        "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}<|call|>"
        "<|start|>assistant<|channel|>analysis to=functions.b <|constrain|>json<|message|>"
        '{"x":1}<|call|>'
        '<|start|>assistant to=functions.a<|channel|>commentary<|message|>{"y":2}<|call|>'
    )
    calls = completion_of(enc, output)["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "{}"),
        ("b", '{"x":1}'),
        ("a", '{"y":2}'),
    ]
    assert len({c["id"] for c in calls}) == 3


def test_ids_are_deterministic_when_seeded(enc: HarmonyEncoding) -> None:
    output = encode(enc, "<|channel|>commentary to=functions.a<|message|>{}<|call|>")
    one = chat_completion_from_tokens(enc, output, model="m", ids="s")
    two = chat_completion_from_tokens(enc, output, model="m", ids="s")
    other = chat_completion_from_tokens(enc, output, model="m", ids="t")
    assert one["id"] == two["id"] != other["id"]
    ids = [c["choices"][0]["message"]["tool_calls"][0]["id"] for c in (one, two, other)]
    assert ids[0] == ids[1] != ids[2]
    unseeded = chat_completion_from_tokens(enc, output, model="m")
    assert unseeded["choices"][0]["message"]["tool_calls"][0]["id"] != ids[0]


def test_finish_reason_length_when_cut_off(enc: HarmonyEncoding) -> None:
    data = completion_of(enc, "<|channel|>final<|message|>The answer is", finished=False)
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["choices"][0]["message"]["content"] == "The answer is"
    # Without a stop token the output reads as cut off, unless the caller says the
    # engine stopped normally (some leave the stop token out).
    done = "<|channel|>final<|message|>Done"
    assert completion_of(enc, done)["choices"][0]["finish_reason"] == "length"
    assert completion_of(enc, done, finished=True)["choices"][0]["finish_reason"] == "stop"


def test_usage_and_reasoning_field(enc: HarmonyEncoding) -> None:
    output = (
        "<|channel|>analysis<|message|>think think<|end|>"
        "<|start|>assistant<|channel|>final<|message|>ok"
    )
    data = completion_of(enc, output, prompt_tokens=10, reasoning_field="reasoning")
    assert data["choices"][0]["message"]["reasoning"] == "think think"
    usage = data["usage"]
    assert usage["prompt_tokens"] == 10
    assert usage["completion_tokens"] == len(encode(enc, output))
    assert usage["total_tokens"] == 10 + usage["completion_tokens"]
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] < usage["completion_tokens"]


def test_model_mistakes_never_raise_nor_leak_markup(enc: HarmonyEncoding) -> None:
    outputs = [
        # <|end|><|start|>assistant forgotten between messages
        "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>Hi<|return|>",
        "<|channel|>analysis<|message|>hmm<|channel|>final<|message|>Hi<|return|>",
        # a stray special token inside the answer
        "<|channel|>final<|message|>H<|constrain|>i<|return|>",
        # text after the stop token, a second stop token
        "<|channel|>final<|message|>Hi<|return|> trailing<|end|>",
        # a header the strict parser refuses
        "<|channel|>final extra words here<|message|>Hi<|return|>",
    ]
    for output in outputs:
        found: list[OutputDiagnostic] = []
        data = completion_of(enc, output, diagnostics=found)
        message = data["choices"][0]["message"]
        assert message["content"] == "Hi", output
        assert message.get("reasoning_content") in (None, "hmm"), output
        assert found, output  # every repair is reported
        assert all(str(d) for d in found)
    clean: list[OutputDiagnostic] = []
    completion_of(enc, "<|channel|>final<|message|>Hi<|return|>", diagnostics=clean)
    assert clean == []


def test_hallucinated_tool_result_is_not_content(enc: HarmonyEncoding) -> None:
    output = (
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|end|>"
        "<|start|>functions.f to=assistant<|channel|>commentary<|message|>made up<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done<|return|>"
    )
    message = completion_of(enc, output)["choices"][0]["message"]
    assert message["content"] == "Done"
    assert message["reasoning_content"] == "made up"


def test_final_json_is_not_a_tool_call(enc: HarmonyEncoding) -> None:
    for header in ("<|channel|>final json", "<|channel|>final <|constrain|>json"):
        data = completion_of(enc, header + '<|message|>{"a":1}<|return|>')
        assert data["choices"][0]["message"] == {
            "role": "assistant",
            "content": '{"a":1}',
            "refusal": None,
        }
        assert data["choices"][0]["finish_reason"] == "stop"
    data = completion_of(enc, "<|channel|>commentary json<|message|>{}<|end|>")
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "{}", "refusal": None}
    data = completion_of(enc, "<|channel|>commentary to=get_time<|message|>{}<|call|>")
    assert data["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"


def test_empty_output(enc: HarmonyEncoding) -> None:
    data = completion_of(enc, "")
    assert data["choices"][0]["message"] == {"role": "assistant", "content": None, "refusal": None}


# -- round trip -------------------------------------------------------------------------------


def test_round_trip_request_to_completion(enc: HarmonyEncoding) -> None:
    turn = {
        "role": "assistant",
        "reasoning_content": "The user wants two cities; call the tool twice.",
        "content": "Checking both cities…",
        "tool_calls": [
            call("call_x", "get_weather", {"city": "東京"}),
            call("call_y", "get_weather", '{"city": "Paris"}'),
        ],
    }
    request = {"messages": [{"role": "user", "content": "Weather?"}, turn], "tools": [WEATHER]}
    conv = chat_request_to_conversation(request)
    first = next(i for i, m in enumerate(conv.messages) if m.author.role is Role.ASSISTANT)
    _, completion = assistant_turn(enc, conv, first)
    message = chat_completion_from_tokens(enc, completion, model="m", ids=1)["choices"][0][
        "message"
    ]
    assert message["reasoning_content"] == turn["reasoning_content"]
    assert message["content"] == turn["content"]
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ] == [("get_weather", {"city": "東京"}), ("get_weather", {"city": "Paris"})]
    # What harmony cannot carry: call ids. New ones are made (deterministic here).
    assert {c["id"] for c in message["tool_calls"]}.isdisjoint({"call_x", "call_y"})
    # ... and the completion converts back to the same harmony messages.
    again = chat_request_to_conversation(
        {"messages": [{"role": "user", "content": "Weather?"}, message], "tools": [WEATHER]}
    )
    assert again == conv


def test_round_trip_final_answer(enc: HarmonyEncoding) -> None:
    turn = {"role": "assistant", "reasoning_content": "Easy.", "content": "4\n\n**Bold** ünïcode ✓"}
    conv = chat_request_to_conversation({"messages": [{"role": "user", "content": "2+2"}, turn]})
    _, completion = assistant_turn(enc, conv, 2)
    data = chat_completion_from_tokens(enc, completion, model="m")
    valid_completion(data)
    assert data["choices"][0]["message"] == {**turn, "refusal": None}
    assert data["choices"][0]["finish_reason"] == "stop"


def test_a_request_error_says_its_kind_by_type() -> None:
    # Training maps these to its row codes (E110, E134) by type, not by message words.
    from harmonia.openai_compat import (
        ConflictingReasoningError,
        RequestError,
        UnknownRoleError,
        chat_request_to_conversation,
        responses_request_to_conversation,
    )

    with pytest.raises(UnknownRoleError, match="unknown role 'robot'"):
        chat_request_to_conversation({"messages": [{"role": "robot", "content": "hi"}]})
    with pytest.raises(UnknownRoleError):
        responses_request_to_conversation(
            {"input": [{"type": "message", "role": "robot", "content": "hi"}]}
        )
    two = {"role": "assistant", "content": "x", "reasoning_content": "a", "reasoning": "b"}
    with pytest.raises(ConflictingReasoningError) as info:
        chat_request_to_conversation({"messages": [{"role": "user", "content": "q"}, two]})
    assert isinstance(info.value, RequestError) and info.value.path.endswith(".reasoning")
