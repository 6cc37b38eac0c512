"""Benchmark inputs, built identically for harmonia and the reference.

Every builder takes the library module (``harmonia`` or ``openai_harmony``) as its
first argument and uses only that module's public classes, so both libraries get
exactly the same conversations. All generated text is deterministic: it comes
from ``random.Random`` instances with fixed seeds and fixed word lists.
"""

from __future__ import annotations

import json
import random
from types import ModuleType
from typing import Any

AGENT_SEED = 20250628
BIG_TEXT_SEED = 4
COMPLETION_SEED = 1410
BIG_TEXT_BYTES = 120_000

# -- deterministic text ---------------------------------------------------------

_WORD_TEXT = (
    "the a an of to in for on with by from as at into over under about after before "
    "between during without within system model token parser request response value "
    "result error cache buffer stream message channel server client user agent tool "
    "function schema field record table index query batch window budget latency "
    "throughput memory thread process queue policy report summary draft version "
    "release branch commit review test suite fixture sample metric baseline weather "
    "forecast city river market price order invoice customer account payment travel "
    "flight hotel booking meeting calendar note document section chapter paragraph "
    "is are was were be has have had can could should would will may might must "
    "returns reads writes builds checks sends keeps moves opens closes starts stops "
    "quickly carefully roughly exactly usually rarely often never always again "
    "large small early late new old simple complex stable noisy fast slow local remote "
    "first second third final last next previous every each some many few most"
)
_WORDS = tuple(_WORD_TEXT.split())

_NON_ASCII = (
    "café",
    "naïve",
    "Zürich",
    "São Paulo",
    "Kraków",
    "façade",
    "déjà vu",
    "smörgåsbord",
    "東京",
    "日本語のテキスト",
    "北京市",
    "서울",
    "Привет, мир",
    "Ελληνικά",
    "שלום",
    "مرحبا",
    "हिन्दी",
    "🙂",
    "🚀",
    "👩‍💻",
    "€42",
    "±3 °C",
    "“quoted”",
    "—",
    "…",
)

_IDENTIFIERS = (
    "items",
    "total",
    "buffer",
    "result",
    "offset",
    "limit",
    "record",
    "payload",
    "counter",
    "window",
    "cache",
    "values",
)


class TextGen:
    """Seeded generator of realistic-looking prose, code and mixed-script text."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))

    def sentence(self, lo: int = 8, hi: int = 18) -> str:
        text = self.words(self.rng.randint(lo, hi))
        if self.rng.random() < 0.2:
            text += ", " + self.rng.choice(_NON_ASCII)
        if self.rng.random() < 0.25:
            text += f" {self.rng.randint(2, 9999)}"
        return text[0].upper() + text[1:] + self.rng.choice(".....?!")

    def paragraph(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))

    def code_block(self) -> str:
        name = "_".join(self.rng.sample(_IDENTIFIERS, 2))
        a, b = self.rng.sample(_IDENTIFIERS, 2)
        n = self.rng.randint(2, 64)
        lines = [
            "```python",
            f"def {name}({a}: list[int], {b}: int = {n}) -> dict[str, int]:",
            f'    """{self.sentence(5, 10)}"""',
            "    out: dict[str, int] = {}",
            f"    for i, x in enumerate({a}):",
            f"        if x % {b} == 0:",
            f'            out[f"{{i}}:{a}"] = x * {self.rng.randint(2, 9)}',
            f"    return out  # {self.words(4)}",
            "```",
        ]
        return "\n".join(lines)

    def bullet_list(self) -> str:
        count = self.rng.randint(3, 6)
        return "\n".join(f"- {self.sentence(4, 9)}" for _ in range(count))

    def mixed_line(self) -> str:
        picks = self.rng.sample(_NON_ASCII, 4)
        return f"> {picks[0]} {self.words(3)} {picks[1]} — {picks[2]}, {picks[3]}"

    def section(self, index: int) -> str:
        parts = [f"## Section {index}: {self.words(3).title()}", self.paragraph(4)]
        roll = self.rng.random()
        if roll < 0.35:
            parts.append(self.code_block())
        elif roll < 0.6:
            parts.append(self.bullet_list())
        if self.rng.random() < 0.4:
            parts.append(self.mixed_line())
        parts.append(self.paragraph(self.rng.randint(2, 5)))
        return "\n\n".join(parts)


def big_text(size: int = BIG_TEXT_BYTES, seed: int = BIG_TEXT_SEED) -> str:
    """About ``size`` UTF-8 bytes of markdown-ish prose, code and non-ASCII text."""
    gen = TextGen(seed)
    sections: list[str] = []
    total = 0
    while total < size:
        section = gen.section(len(sections) + 1)
        sections.append(section)
        total += len(section.encode()) + 2
    text = "\n\n".join(sections).encode()[:size].decode(errors="ignore")
    return text.rstrip() + "\n"


# -- workload 2: the format guide's weather conversation -----------------------

LOCATION = {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}
FORMAT = {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"location": LOCATION, "format": FORMAT},
    "required": ["location"],
}


def weather_conversation(h: ModuleType) -> Any:
    """The conversation of the guide's "Harmony renderer library" Python example."""
    system = (
        h.SystemContent.new()
        .with_reasoning_effort(h.ReasoningEffort.HIGH)
        .with_conversation_start_date("2025-06-28")
    )
    developer = (
        h.DeveloperContent.new()
        .with_instructions("Always respond in riddles")
        .with_function_tools(
            [
                h.ToolDescription.new(
                    "get_current_weather",
                    "Gets the current weather in the provided location.",
                    parameters=WEATHER_PARAMETERS,
                ),
            ]
        )
    )
    return h.Conversation.from_messages(
        [
            h.Message.from_role_and_content(h.Role.SYSTEM, system),
            h.Message.from_role_and_content(h.Role.DEVELOPER, developer),
            h.Message.from_role_and_content(h.Role.USER, "What is the weather in Tokyo?"),
            h.Message.from_role_and_content(
                h.Role.ASSISTANT,
                'User asks: "What is the weather in Tokyo?" '
                "We need to use get_current_weather tool.",
            ).with_channel("analysis"),
            h.Message.from_role_and_content(h.Role.ASSISTANT, '{"location": "Tokyo"}')
            .with_channel("commentary")
            .with_recipient("functions.get_current_weather")
            .with_content_type("<|constrain|> json"),
            h.Message.from_author_and_content(
                h.Author.new(h.Role.TOOL, "functions.get_current_weather"),
                '{ "temperature": 20, "sunny": true }',
            ).with_channel("commentary"),
        ]
    )


# -- workload 3: a 20-turn agent conversation ------------------------------------

AGENT_TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "get_current_weather",
        "Gets the current weather in the provided location.",
        WEATHER_PARAMETERS,
    ),
    (
        "search_documents",
        "Searches the internal document store and returns the best matches.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Free-text search query"},
                "filters": {
                    "type": "object",
                    "description": "Optional filters applied before ranking",
                    "properties": {
                        "source": {"type": "string", "enum": ["wiki", "tickets", "email", "code"]},
                        "date_range": {
                            "type": "object",
                            "properties": {
                                "start": {"type": "string", "description": "ISO date"},
                                "end": {"type": "string", "description": "ISO date"},
                            },
                        },
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "max_results": {"type": "integer", "default": 10},
            },
            "required": ["query"],
        },
    ),
    (
        "create_calendar_event",
        "Creates a calendar event and invites the attendees.",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "start": {"type": "string", "description": "ISO 8601 start time"},
                "duration_minutes": {"type": "integer", "default": 30},
                "attendees": {
                    "type": "array",
                    "description": "People to invite",
                    "items": {
                        "type": "object",
                        "properties": {
                            "email": {"type": "string"},
                            "optional": {"type": "boolean", "default": False},
                        },
                        "required": ["email"],
                    },
                },
                "location": {
                    "type": "object",
                    "properties": {
                        "room": {"type": "string"},
                        "video_link": {"type": "boolean"},
                    },
                },
            },
            "required": ["title", "start"],
        },
    ),
]

_CITIES = ("Tokyo", "Paris", "Zürich", "São Paulo", "Lagos", "Seattle", "Kraków", "Mumbai")


def _tool_call(gen: TextGen, turn: int) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(recipient, channel, arguments, result) for one turn's tool call."""
    rng = gen.rng
    kind = turn % 4
    if kind == 3:
        query = gen.words(4)
        result = {"results": [{"title": gen.words(4), "url": f"https://example.com/{turn}"}]}
        return "browser.search", "analysis", {"query": query}, result
    name = AGENT_TOOLS[kind][0]
    if kind == 0:
        args: dict[str, Any] = {"location": rng.choice(_CITIES)}
        result = {"temperature": rng.randint(-5, 35), "sunny": rng.random() < 0.5}
    elif kind == 1:
        args = {"query": gen.words(3), "filters": {"source": "wiki"}, "max_results": 3}
        result = {"hits": [{"id": rng.randint(100, 999), "snippet": gen.sentence(6, 10)}]}
    else:
        args = {"title": gen.words(3), "start": f"2025-07-{turn + 1:02d}T10:00:00"}
        result = {"event_id": f"evt_{rng.randint(1000, 9999)}", "status": "created"}
    return f"functions.{name}", "commentary", args, result


def _agent_turn(h: ModuleType, gen: TextGen, turn: int) -> list[Any]:
    recipient, channel, args, result = _tool_call(gen, turn)
    return [
        h.Message.from_role_and_content(h.Role.USER, gen.sentence(5, 8)),
        h.Message.from_role_and_content(h.Role.ASSISTANT, gen.sentence(5, 10)).with_channel(
            "analysis"
        ),
        h.Message.from_role_and_content(h.Role.ASSISTANT, json.dumps(args))
        .with_channel(channel)
        .with_recipient(recipient)
        .with_content_type("<|constrain|>json"),
        h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, recipient), json.dumps(result))
        .with_channel(channel)
        .with_recipient("assistant"),
        h.Message.from_role_and_content(h.Role.ASSISTANT, gen.sentence(4, 9)).with_channel("final"),
    ]


def agent_conversation(h: ModuleType, turns: int = 20, seed: int = AGENT_SEED) -> Any:
    """System (browser tool), developer (3 function tools), then ``turns`` tool-using turns."""
    gen = TextGen(seed)
    system = (
        h.SystemContent.new()
        .with_reasoning_effort(h.ReasoningEffort.MEDIUM)
        .with_conversation_start_date("2025-06-28")
        .with_browser_tool()
    )
    tools = [h.ToolDescription.new(n, d, parameters=p) for n, d, p in AGENT_TOOLS]
    developer = (
        h.DeveloperContent.new()
        .with_instructions("You are a careful assistant. Use tools when they help.")
        .with_function_tools(tools)
    )
    messages = [
        h.Message.from_role_and_content(h.Role.SYSTEM, system),
        h.Message.from_role_and_content(h.Role.DEVELOPER, developer),
    ]
    for turn in range(turns):
        messages += _agent_turn(h, gen, turn)
    return h.Conversation.from_messages(messages)


# -- workload 4: one big user message --------------------------------------------


def big_message_conversation(h: ModuleType, text: str) -> Any:
    return h.Conversation.from_messages([h.Message.from_role_and_content(h.Role.USER, text)])


# -- workloads 5 and 6: a long assistant completion ------------------------------


def completion_messages(h: ModuleType, seed: int = COMPLETION_SEED) -> list[Any]:
    """One agentic assistant turn: analysis, preamble, tool calls and results, final."""
    gen = TextGen(seed)
    lookup = "functions.search_documents"
    weather = "functions.get_current_weather"

    def assistant(text: str, channel: str) -> Any:
        return h.Message.from_role_and_content(h.Role.ASSISTANT, text).with_channel(channel)

    def call(recipient: str, args: dict[str, Any]) -> Any:
        return (
            assistant(json.dumps(args), "commentary")
            .with_recipient(recipient)
            .with_content_type("<|constrain|>json")
        )

    def tool(name: str, result: object) -> Any:
        author = h.Author.new(h.Role.TOOL, name)
        return (
            h.Message.from_author_and_content(author, json.dumps(result, ensure_ascii=False))
            .with_channel("commentary")
            .with_recipient("assistant")
        )

    hits = [{"id": i, "title": gen.words(5), "snippet": gen.sentence()} for i in range(8)]
    final = "\n\n".join([gen.paragraph(5), gen.code_block(), gen.bullet_list(), gen.paragraph(6)])
    return [
        assistant(gen.paragraph(18), "analysis"),
        assistant(gen.paragraph(2), "commentary"),
        call(lookup, {"query": gen.words(4), "filters": {"source": "code"}, "max_results": 8}),
        tool(lookup, {"hits": hits}),
        assistant(gen.paragraph(11), "analysis"),
        call(weather, {"location": "Zürich", "format": "celsius"}),
        tool(weather, {"temperature": 21, "sunny": True, "note": gen.sentence()}),
        assistant(gen.paragraph(7), "analysis"),
        assistant(final, "final"),
    ]


def completion_tokens(h: ModuleType, enc: Any) -> list[int]:
    """The completion's tokens, without the leading ``<|start|>assistant``.

    Messages are rendered one by one (``render``) so no chain-of-thought policy
    drops the analysis; the parser is told the role, so the first header's
    ``<|start|>`` and role tokens are removed.
    """
    tokens: list[int] = []
    for message in completion_messages(h):
        tokens += enc.render(message)
    return tokens[2:]


# -- the engine benchmarks' prompt ------------------------------------------------


def engine_prompt(h: ModuleType, question: str) -> tuple[Any, list[int]]:
    """A default system message and ``question``, and its ids ready for the reply.

    What the engine benchmarks generate from: the conversation (for a turn
    grammar) and the prompt ids.
    """
    enc = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    conversation = h.Conversation.from_messages(
        [
            h.Message.from_role_and_content(h.Role.SYSTEM, h.SystemContent.new()),
            h.Message.from_role_and_content(h.Role.USER, question),
        ]
    )
    return conversation, list(
        enc.render_conversation_for_completion(conversation, h.Role.ASSISTANT)
    )
