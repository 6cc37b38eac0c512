"""Input formats, detection, weights, dates, and problem codes with line numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harmonia import Conversation, HarmonyEncoding, Message, ReasoningEffort, Role
from harmonia.training import InputOptions, render_batch
from harmonia.training._inputs import convert_row, detect_format

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Gets the weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
OPENAI = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3 degrees"},
        {"role": "assistant", "content": "It is 3 degrees.", "weight": 1},
    ],
    "tools": TOOLS,
}


def shape(conversation: Conversation) -> list[tuple[str, str | None, str | None, str]]:
    return [
        (
            m.author.name or m.author.role.value,
            m.channel,
            m.recipient,
            getattr(m.content[0], "text", ""),
        )
        for m in conversation.messages
        if m.author.role not in (Role.SYSTEM, Role.DEVELOPER)
    ]


EXPECTED_TOOL_TURN = [
    ("user", None, None, "Weather in Oslo?"),
    ("assistant", "analysis", None, "Need the tool."),
    ("assistant", "commentary", "functions.get_weather", '{"city": "Oslo"}'),
    ("functions.get_weather", "commentary", "assistant", "3 degrees"),
    ("assistant", "final", None, "It is 3 degrees."),
]


def test_openai_chat_row() -> None:
    row = convert_row(OPENAI, InputOptions())
    assert row.format == "openai"
    assert shape(row.conversation) == EXPECTED_TOOL_TURN
    developer = row.conversation.messages[1]
    assert developer.author.role is Role.DEVELOPER


def test_sharegpt_row_with_think_and_function_call() -> None:
    sharegpt = {
        "system": "Be brief.",
        "tools": json.dumps([TOOLS[0]["function"]]),
        "conversations": [
            {"from": "human", "value": "Weather in Oslo?"},
            {
                "from": "function_call",
                "value": json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}}),
            },
            {"from": "observation", "value": "3 degrees"},
            {"from": "gpt", "value": "<think>Cold.</think>It is 3 degrees."},
        ],
    }
    row = convert_row(sharegpt, InputOptions())
    assert row.format == "sharegpt"
    assert shape(row.conversation) == [
        ("user", None, None, "Weather in Oslo?"),
        ("assistant", "commentary", "functions.get_weather", '{"city":"Oslo"}'),
        ("functions.get_weather", "commentary", "assistant", "3 degrees"),
        ("assistant", "analysis", None, "Cold."),
        ("assistant", "final", None, "It is 3 degrees."),
    ]


PLAIN = {
    "openai": {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    },
    "sharegpt": {
        "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]
    },
}


@pytest.mark.parametrize("fmt", PLAIN)
def test_blank_tools_text_is_no_tools_in_every_format(fmt: str) -> None:
    plain, options = PLAIN[fmt], InputOptions()
    blank = convert_row({**plain, "tools": " \n"}, options)
    assert blank.conversation == convert_row(plain, options).conversation


@pytest.mark.parametrize("tools", ['{"name": "f"}', "3", {"name": "f"}])
@pytest.mark.parametrize("fmt", PLAIN)
def test_tools_not_a_list_reject_the_row_in_every_format(fmt: str, tools: object) -> None:
    batch = render_batch([json.dumps({**PLAIN[fmt], "tools": tools})], first_line=7)
    assert [(p.code, p.line) for p in batch.problems] == [("E150", 7)]
    assert "tools" in batch.problems[0].message and batch.stats.rows_ok == 0


def test_harmony_row_round_trips() -> None:
    conversation = Conversation.from_messages(
        [
            Message.from_role_and_content(Role.USER, "Hi"),
            Message.from_role_and_content(Role.ASSISTANT, "Hello").with_channel("final"),
        ]
    )
    row = convert_row(json.loads(conversation.to_json()), InputOptions())
    assert row.format == "harmony" and row.conversation == conversation


def test_responses_row() -> None:
    items = {
        "instructions": "Be brief.",
        "tools": [{"type": "function", **TOOLS[0]["function"]}],
        "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "type": "reasoning",
                "id": "r1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Need the tool."}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "3 degrees"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "It is 3 degrees."}],
            },
        ],
    }
    row = convert_row(items, InputOptions())
    assert row.format == "responses"
    assert shape(row.conversation) == EXPECTED_TOOL_TURN


def test_hugging_face_thinking_and_columns() -> None:
    hf = {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "thinking": "Add.", "content": "4"},
        ],
        "chat_template_kwargs": {"reasoning_effort": "high"},
    }
    row = convert_row(hf, InputOptions())
    assert shape(row.conversation)[1:] == [
        ("assistant", "analysis", None, "Add."),
        ("assistant", "final", None, "4"),
    ]
    system = row.conversation.messages[0].content[0]
    assert getattr(system, "reasoning_effort", None) is ReasoningEffort.HIGH
    flat = {"developer": "Be brief.", "user": "2+2?", "analysis": "Add.", "final": "4"}
    assert detect_format(flat) == "columns"
    assert shape(convert_row(flat, InputOptions()).conversation) == shape(row.conversation)


def test_date_is_never_today_by_accident(enc: HarmonyEncoding) -> None:
    row = {"messages": [{"role": "user", "content": "Hi"}], "date": "2025-01-02"}

    def system_text(options: InputOptions) -> str:
        conversation = convert_row(row, options).conversation
        return enc.decode(enc.render_conversation(Conversation([conversation.messages[0]])))

    assert "Current date" not in system_text(InputOptions())
    assert "Current date: 2024-12-31" in system_text(InputOptions(date="2024-12-31"))
    assert "Current date: 2025-01-02" in system_text(InputOptions(date="from-row"))


def test_weights_follow_the_assistant_message_they_belong_to() -> None:
    data: dict[str, Any] = json.loads(json.dumps(OPENAI))
    data["messages"][2]["weight"] = 0
    row = convert_row(data, InputOptions())
    names = [
        (m.channel, w) for m, w in zip(row.conversation.messages, row.weights or [], strict=True)
    ]
    assert ("analysis", 0) in names and ("commentary", 0) in names and ("final", 1) in names


BAD_ROWS: list[tuple[str, str]] = [
    ("{not json", "E101"),
    (json.dumps({"messages": []}), "E102"),
    (json.dumps({"text": "x"}), "E103"),
    (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}), "E110"),
    (json.dumps({"messages": [{"role": "user", "content": "only a question"}]}), "E120"),
    (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "z", "content": "r"},
                ]
            }
        ),
        "E130",
    ),
    (
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "y", "thinking": "a", "reasoning": "b"},
                ]
            }
        ),
        "E134",
    ),
]


def test_problems_have_codes_lines_and_rejects() -> None:
    good = json.dumps(OPENAI)
    rows = [good, *(raw for raw, _ in BAD_ROWS), good]
    batch = render_batch(rows, first_line=10, source="data.jsonl")
    assert batch.stats.rows == len(rows) and batch.stats.rows_ok == 2
    assert [(p.code, p.line) for p in batch.problems] == [
        (code, 11 + k) for k, (_, code) in enumerate(BAD_ROWS)
    ]
    assert [raw for _, raw in batch.rejected] == [raw for raw, _ in BAD_ROWS]
    assert all(p.severity == "error" and p.source == "data.jsonl" for p in batch.problems)
    assert batch.source_line == [10, 10 + len(rows) - 1]


def test_special_token_text_is_a_warning() -> None:
    row = {
        "messages": [
            {"role": "user", "content": "what is <|channel|>?"},
            {"role": "assistant", "content": "A token."},
        ]
    }
    batch = render_batch([row])
    assert [(p.code, p.severity) for p in batch.problems] == [("W202", "warning")]
    assert batch.stats.rows_ok == 1


@pytest.mark.parametrize("fmt", ["openai", "sharegpt"])
def test_a_forced_format_is_used(fmt: str) -> None:
    batch = render_batch([json.dumps(OPENAI)], options=InputOptions(format=fmt))  # type: ignore[arg-type]
    assert (fmt == "openai") == (batch.stats.rows_ok == 1)
