"""Shared helpers of the training tests: the golden conversations and the corpus path."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harmonia import (
    Author,
    DeveloperContent,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
)
from tool_examples import WEATHER_TOOL

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"


def shared_corpus() -> Path:
    """The reference corpus, in ``../shared/golden`` beside the checkout (as in CI)."""
    return ROOT.parent / "shared" / "golden" / "reference-corpus.jsonl.gz"


WEATHER = WEATHER_TOOL


def system(browser: bool = False, python: bool = False) -> Message:
    content = (
        SystemContent.new()
        .with_reasoning_effort(ReasoningEffort.LOW)
        .with_conversation_start_date("2026-01-01")
    )
    if browser:
        content = content.with_browser_tool()
    if python:
        content = content.with_python_tool()
    return Message.from_role_and_content(Role.SYSTEM, content)


def developer(tools: bool = True) -> Message:
    content = DeveloperContent.new().with_instructions("Be brief.")
    if tools:
        content = content.with_function_tools([WEATHER])
    return Message.from_role_and_content(Role.DEVELOPER, content)


def user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def analysis(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis")


def final(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")


def preamble(text: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("commentary")


def call(city: str, constrained: bool = True) -> Message:
    m = (
        Message.from_role_and_content(Role.ASSISTANT, json.dumps({"city": city}))
        .with_channel("commentary")
        .with_recipient("functions.get_weather")
    )
    return m.with_content_type("<|constrain|>json" if constrained else "json")


def result(text: str, name: str = "functions.get_weather") -> Message:
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, name), text)
        .with_channel("commentary")
        .with_recipient("assistant")
    )


def builtin_call(recipient: str, body: str) -> Message:
    return (
        Message.from_role_and_content(Role.ASSISTANT, body)
        .with_channel("analysis")
        .with_recipient(recipient)
        .with_content_type("code" if recipient == "python" else "json")
    )


Conv = tuple[str, list[Message], list[float | None] | None]


def _turn(rng: random.Random, n: int, features: set[str]) -> list[Message]:
    """One random assistant turn (after its user message)."""
    out: list[Message] = []
    if rng.random() < 0.75:
        out.append(analysis(f"Think {n}."))
        features.add("reasoning")
    if rng.random() < 0.35:
        if rng.random() < 0.4:
            out.append(preamble(f"Checking {n}."))
            features.add("preamble")
        out.append(call(f"C{n}", constrained=rng.random() < 0.7))
        out.append(result(f'{{"t": {n}}}'))
        features.add("tools")
        if rng.random() < 0.6:
            out.append(analysis(f"Got {n}."))
    out.append(final(f"Answer {n}."))
    return out


def golden_conversations() -> list[Conv]:
    """About 50 conversations: hand-written ones for each feature, then seeded random ones."""
    convs: list[Conv] = [
        ("single-no-reasoning", [user("Hi"), final("Hello")], None),
        ("single-reasoning", [user("2+2?"), analysis("Add."), final("4")], None),
        (
            "single-system-developer",
            [system(), developer(False), user("Hi"), analysis("Greet."), final("Hello")],
            None,
        ),
        (
            "multi-reasoning",
            [user("Q1"), analysis("T1"), final("A1"), user("Q2"), analysis("T2"), final("A2")],
            None,
        ),
        (
            "multi-first-without-reasoning",
            [user("Q1"), final("A1"), user("Q2"), analysis("T2"), final("A2")],
            None,
        ),
        (
            "multi-three-turns",
            [
                user("Q1"),
                analysis("T1"),
                final("A1"),
                user("Q2"),
                final("A2"),
                user("Q3"),
                analysis("T3"),
                final("A3"),
            ],
            None,
        ),
        (
            "tool-call-and-result",
            [
                developer(),
                user("Weather in Oslo?"),
                analysis("Need the tool."),
                call("Oslo"),
                result('{"temp": 3}'),
                analysis("It is cold."),
                final("3 degrees."),
            ],
            None,
        ),
        (
            "preamble-then-call",
            [
                developer(),
                user("Weather in Rome?"),
                analysis("Tell the user, then call."),
                preamble("Let me check."),
                call("Rome", constrained=False),
                result('{"temp": 20}'),
                final("20 degrees."),
            ],
            None,
        ),
        (
            "trace-ends-with-call",
            [developer(), user("Weather in Bern?"), analysis("Call it."), call("Bern")],
            None,
        ),
        (
            "trace-ends-with-result",
            [developer(), user("Weather?"), call("Paris"), result('{"temp": 9}')],
            None,
        ),
        (
            "builtin-browser",
            [
                system(browser=True),
                user("News?"),
                analysis("Search."),
                builtin_call("browser.search", '{"query": "news"}'),
                result("[0] Headline", name="browser.search"),
                final("A headline."),
            ],
            None,
        ),
        (
            "builtin-python",
            [
                system(python=True),
                user("Compute 2**10"),
                builtin_call("python", "print(2**10)"),
                result("1024", name="python"),
                final("1024"),
            ],
            None,
        ),
        (
            "weight-zero-first-turn",
            [user("Q1"), final("bad"), user("Q2"), final("good")],
            [None, 0, None, 1],
        ),
        (
            "weight-zero-last-final",
            [user("Q1"), analysis("T1"), final("A1")],
            [None, None, 0],
        ),
        (
            "multi-turn-tools",
            [
                developer(),
                user("Oslo?"),
                analysis("Tool."),
                call("Oslo"),
                result("3"),
                analysis("Cold."),
                final("3."),
                user("Rome?"),
                analysis("Tool again."),
                call("Rome"),
                result("20"),
                final("20."),
            ],
            None,
        ),
        (
            "interrupted-turn",
            [user("Q1"), analysis("T1"), user("Actually, Q2"), analysis("T2"), final("A2")],
            None,
        ),
        ("ends-with-analysis", [user("Q"), analysis("Still thinking.")], None),
        ("user-only", [user("Just a question")], None),
    ]
    rng = random.Random(16)
    for n in range(50 - len(convs)):
        features: set[str] = set()
        messages: list[Message] = [developer()] if rng.random() < 0.5 else []
        for t in range(rng.randint(1, 4)):
            messages.append(user(f"Q{t}"))
            messages += _turn(rng, t, features)
        name = f"random-{n:02d}-" + ("-".join(sorted(features)) or "plain")
        weights: list[float | None] | None = None
        if rng.random() < 0.15:
            weights = [rng.choice([None, 0, 1]) for _ in messages]
            name += "-weights"
        convs.append((name, messages, weights))
    return convs


@pytest.fixture(scope="session")
def conversations() -> list[Conv]:
    return golden_conversations()


def marked(decode: Callable[[list[int]], str], ids: list[int], mask: Any) -> str:
    """The text of the ids with trained runs in ⟦ ⟧."""
    out: list[str] = []
    run: list[int] = []
    state = False
    for t, m in zip(ids, mask, strict=True):
        if bool(m) != state and run:
            out.append(("⟦" + decode(run) + "⟧") if state else decode(run))
            run = []
        state = bool(m)
        run.append(t)
    if run:
        out.append(("⟦" + decode(run) + "⟧") if state else decode(run))
    return "".join(out)


@pytest.fixture(scope="session")
def mark() -> Callable[[Callable[[list[int]], str], list[int], Any], str]:
    return marked


@pytest.fixture(scope="session")
def corpus_path() -> Path:
    return shared_corpus()


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    path = DATA / "golden_masks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def random_conversation(rng: random.Random) -> tuple[list[Message], list[float | None] | None]:
    """A random but well-formed conversation: 1-5 turns of reasoning, preambles, calls."""
    messages: list[Message] = []
    if rng.random() < 0.3:
        messages.append(system(browser=rng.random() < 0.3))
    if rng.random() < 0.5:
        messages.append(developer())
    for t in range(rng.randint(1, 5)):
        messages.append(user(f"Q{t} " + "x" * rng.randint(0, 5)))
        for _ in range(rng.choice([0, 0, 1, 2])):
            if rng.random() < 0.7:
                messages.append(analysis(f"T{t}"))
            if rng.random() < 0.3:
                messages.append(preamble(f"P{t}"))
            if rng.random() < 0.2:
                messages.append(builtin_call("browser.search", '{"query": "q"}'))
                messages.append(result("page", name="browser.search"))
            else:
                messages.append(call(f"C{t}", constrained=rng.random() < 0.5))
                messages.append(result(f"R{t}"))
        if rng.random() < 0.8:
            messages.append(analysis(f"U{t}"))
        if rng.random() < 0.9 or t == 0:
            messages.append(final(f"A{t}"))
    weights: list[float | None] | None = None
    if rng.random() < 0.2:
        weights = [rng.choice([None, 1, 0]) for _ in messages]
    return messages, weights


@pytest.fixture(scope="session")
def random_conversations() -> list[tuple[list[Message], list[float | None] | None]]:
    rng = random.Random(1616)
    return [random_conversation(rng) for _ in range(120)]


def chat_row(rng: random.Random, n: int) -> dict[str, Any]:
    """A random OpenAI-style chat row: 1-4 turns, reasoning, a third with tool calls."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    tools = rng.random() < 0.33
    for t in range(rng.randint(1, 4)):
        messages.append(
            {"role": "user", "content": f"Question {n}.{t} " + "word " * rng.randint(1, 30)}
        )
        if tools and rng.random() < 0.6:
            messages.append(
                {
                    "role": "assistant",
                    "reasoning_content": "Need the weather.",
                    "tool_calls": [
                        {
                            "id": f"c{t}",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": "3 degrees"})
        answer: dict[str, Any] = {"role": "assistant", "content": "Answer " * rng.randint(1, 40)}
        if rng.random() < 0.8:
            answer["reasoning_content"] = "Thinking " * rng.randint(1, 40)
        messages.append(answer)
    row: dict[str, Any] = {"messages": messages}
    if tools:
        row["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Gets the weather.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ]
    return row


def write_corpus(path: Path, rows: int, seed: int = 5, bad_every: int = 37) -> Path:
    """A JSONL file of chat rows, with a bad row every ``bad_every`` lines and a blank line."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for n in range(rows):
            if n % bad_every == bad_every - 1:
                handle.write("{broken json\n")
            elif n == 3:
                handle.write("\n")
            else:
                handle.write(json.dumps(chat_row(rng, n)) + "\n")
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl", 240)
