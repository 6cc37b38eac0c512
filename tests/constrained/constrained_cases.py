"""Conversations, a sampler and a turn checker shared by the constrained-decoding tests.

``CASES`` are the conversations of the property test and the benchmark
(``benchmarks/bench_constrained.py`` imports this module too). ``TurnSampler`` draws
a turn token by token under a matcher's mask; ``check_turn`` checks a turn the
way a server would use it: strict parse, declared recipient, arguments and
structured answer valid against their schemas (``jsonschema``).

Test files import this as a plain module: pytest's prepend import mode puts each
test file's folder first on ``sys.path`` (there is no ``tests/__init__.py``), and
the name is unique across tests/. It is not a test file, so it is not collected.

The sampler draws from random logits: each token's logit is the bias of its
class plus Gumbel noise, and the biases are drawn at random for every token. The
classes are special tokens; short JSON punctuation, split into opening brackets,
closing brackets and the rest; short words and numbers; whitespace; everything
else. The argmax under the mask is computed in closed form (pick a class with
probability proportional to ``exp(bias) * allowed tokens in it``, then an
allowed token of that class uniformly), so a step costs tens of microseconds
instead of a pass over 201,089 logits. The bias ranges make stop tokens and
closing brackets likely enough that turns end after tens of tokens, while every
allowed token keeps a chance.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import harmonia as h
from harmonia import Conversation, DeveloperContent, Message, Role, SystemContent
from harmonia._tokenizer import special_tokens as st

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from harmonia.constrained import GrammarOptions, TurnMatcher  # noqa: E402

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)

# -- the conversations -----------------------------------------------------------------------

ORDER = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "tier": {"type": "string", "enum": ["free", "pro", "enterprise"]},
            },
            "required": ["name", "tier"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                },
                "required": ["sku", "quantity"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "maxItems": 4,
        },
        "gift": {"type": "boolean"},
        "note": {"anyOf": [{"type": "string", "maxLength": 30}, {"type": "null"}]},
    },
    "required": ["customer", "items"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "The city", "maxLength": 40},
        "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["location"],
    "additionalProperties": False,
}
TAGS = {
    "type": "object",
    "$defs": {"tag": {"type": "string", "enum": ["red", "green", "blue"]}},
    "properties": {
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3},
        "mode": {"const": "replace"},
        "weights": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
    },
    "required": ["tags", "mode"],
    "additionalProperties": False,
}
SHOPPING = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "qty": {"type": "integer", "minimum": 1},
                    "unit": {"enum": ["pcs", "kg", "l"]},
                },
                "required": ["name", "qty"],
                "additionalProperties": False,
            },
            "maxItems": 5,
        },
        "store": {"type": "string", "enum": ["any", "market", "online"]},
        "urgent": {"type": "boolean"},
    },
    "required": ["items", "store"],
    "additionalProperties": False,
}

FUNCTIONS = [
    h.ToolDescription.new("create_order", "Places an order.", ORDER),
    h.ToolDescription.new("get_weather", "Gets the weather.", WEATHER),
    h.ToolDescription.new("get_location", "Gets the user's location."),
    h.ToolDescription.new("tag_items", "Tags the selected items.", TAGS),
]


def _conversation(system: SystemContent, developer: DeveloperContent | None) -> Conversation:
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    if developer is not None:
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    messages.append(Message.from_role_and_content(Role.USER, "Help me, please."))
    return Conversation.from_messages(messages)


@dataclass
class Case:
    """A conversation to continue, the grammar options, and what it declares."""

    name: str
    conversation: Conversation
    options: GrammarOptions = field(default_factory=GrammarOptions)

    @property
    def tools(self) -> dict[str, dict[str, Any] | None]:
        """recipient -> argument schema (None: free text), read off the conversation."""
        out: dict[str, dict[str, Any] | None] = {}
        for message in self.conversation.messages:
            for part in message.content:
                if isinstance(part, (SystemContent, DeveloperContent)):
                    for ns in (part.tools or {}).values():
                        if not ns.tools and isinstance(part, SystemContent):
                            out[ns.name] = None
                        for tool in ns.tools:
                            out[f"{ns.name}.{tool.name}"] = (
                                {"type": "object", "maxProperties": 0}
                                if tool.parameters is None
                                else tool.parameters
                            )
        return out

    @property
    def response_formats(self) -> list[dict[str, Any]]:
        return [
            fmt.schema
            for message in self.conversation.messages
            for part in message.content
            if isinstance(part, DeveloperContent)
            for fmt in part.response_formats or ()
        ]

    def matcher(self) -> TurnMatcher:
        return TurnMatcher.from_conversation(self.conversation, self.options)


CASES = {
    "functions": Case(
        "functions",
        _conversation(
            SystemContent.new(),
            DeveloperContent.new().with_instructions("Be brief.").with_function_tools(FUNCTIONS),
        ),
    ),
    "builtins": Case(
        "builtins",
        _conversation(
            SystemContent.new().with_browser_tool().with_python_tool(),
            None,
        ),
        GrammarOptions(analysis_max_tokens=12),
    ),
    "response_format": Case(
        "response_format",
        _conversation(
            SystemContent.new(),
            DeveloperContent.new()
            .with_function_tools(FUNCTIONS[1:3])
            .with_response_format("shopping_list", SHOPPING, "The list."),
        ),
        GrammarOptions(recipient_placement="role"),
    ),
    "everything": Case(
        "everything",
        _conversation(
            SystemContent.new().with_browser_tool().with_python_tool(),
            DeveloperContent.new()
            .with_function_tools(FUNCTIONS)
            .with_response_format("shopping_list", SHOPPING),
        ),
        GrammarOptions(recipient_placement="channel", json_max_whitespace=4),
    ),
}

# -- the sampler ------------------------------------------------------------------------------

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)
_WORDS = (st.N_VOCAB + 31) // 32
_JSON_PUNCTUATION = frozenset(b'"{}[],: ')


def _class_masks() -> dict[str, np.ndarray]:
    """Bitmasks of the token classes the sampler biases."""
    table = ENC.tokenizer.token_bytes_table
    classes: dict[str, list[int]] = {"special": list(range(st.FIRST_SPECIAL, st.N_VOCAB))}
    for name in ("open", "close", "json", "word", "space"):
        classes[name] = []
    for i, b in enumerate(table[: st.N_ORDINARY]):
        if b.isspace():
            classes["space"].append(i)
        elif len(b) <= 4 and set(b) <= _JSON_PUNCTUATION:
            # Brackets apart: closing ones must win, or "any JSON" values nest forever.
            depth = sum(b.count(c) for c in b"[{") - sum(b.count(c) for c in b"]}")
            classes["open" if depth > 0 else "close" if depth < 0 else "json"].append(i)
        elif len(b) <= 3 and b.isascii() and b.strip().lstrip(b"-").isalnum():
            classes["word"].append(i)
    masks = {}
    taken = np.zeros(st.N_VOCAB, dtype=bool)
    for name, ids in classes.items():
        bits = np.zeros(_WORDS * 32, dtype=bool)
        bits[ids] = True
        taken[ids] = True
        masks[name] = np.packbits(bits, bitorder="little").view("<i4")
    rest = np.zeros(_WORDS * 32, dtype=bool)
    rest[: st.N_VOCAB] = ~taken
    masks["rest"] = np.packbits(rest, bitorder="little").view("<i4")
    return masks


# Bias ranges (natural-log units) a turn's biases are drawn from.
_BIAS_RANGES = {
    "special": (-2.0, 14.0),
    "open": (2.0, 5.0),
    "close": (6.0, 9.0),
    "json": (5.0, 8.0),
    "word": (0.0, 2.5),
    "space": (-4.0, 0.0),
    "rest": (0.0, 0.0),
}


class TurnSampler:
    """Samples turns from random logits under a matcher's masks (module docstring)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.classes = _class_masks()
        self.mask = np.zeros(_WORDS, dtype=np.int32)

    def sample(self, matcher: TurnMatcher, max_tokens: int = 4000) -> list[int]:
        """Sample until the turn is finished; the matcher consumes every token."""
        while not matcher.is_finished:
            if len(matcher.tokens) >= max_tokens:
                tail = ENC.decode(list(matcher.tokens[-200:]))
                raise AssertionError(f"turn did not end in {max_tokens} tokens: ...{tail!r}")
            bias = {name: self.rng.uniform(lo, hi) for name, (lo, hi) in _BIAS_RANGES.items()}
            matcher.fill_mask(self.mask)
            matcher.consume(self.pick(self.mask, bias))
        return list(matcher.tokens)

    def pick(self, mask: np.ndarray, bias: dict[str, float]) -> int:
        """argmax over allowed tokens of (class bias + Gumbel noise), in closed form."""
        total = _popcount(mask)
        counts = {name: _popcount(mask & cm) for name, cm in self.classes.items() if name != "rest"}
        counts["rest"] = total - sum(counts.values())
        weights = [(n, math.exp(bias[n]) * c) for n, c in counts.items() if c]
        if not weights:
            raise AssertionError("the mask allows nothing")
        r = self.rng.random() * sum(w for _, w in weights)
        for name, weight in weights:  # noqa: B007 - the last name is the fallback
            r -= weight
            if r < 0:
                break
        return self._uniform(mask & self.classes[name])

    def _uniform(self, mask: np.ndarray) -> int:
        counts = _popcounts(mask)
        cumulative = np.cumsum(counts)
        r = int(self.rng.integers(cumulative[-1]))
        word = int(np.searchsorted(cumulative, r, side="right"))
        skip = r - (int(cumulative[word - 1]) if word else 0)
        bits = int(mask[word]) & 0xFFFFFFFF
        for bit in range(32):
            if bits >> bit & 1:
                if skip == 0:
                    return word * 32 + bit
                skip -= 1
        raise AssertionError("unreachable: the popcount said otherwise")


def _popcounts(mask: np.ndarray) -> np.ndarray:
    """Set bits per 32-bit word."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(mask.view(np.uint32))
    return _POPCOUNT[mask.view(np.uint8)].reshape(-1, 4).sum(axis=1)


def _popcount(mask: np.ndarray) -> int:
    return int(_popcounts(mask).sum())


# -- checking a turn ----------------------------------------------------------------------------


def check_turn(case: Case, tokens: list[int]) -> list[Message]:
    """Parse ``tokens`` strictly and check them against the case's declarations."""
    messages = ENC.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT)
    assert messages, "no message"
    assert tokens[-1] in (st.CALL, st.RETURN)
    *before, last = messages
    for m in before:
        assert m.author.role is Role.ASSISTANT and m.recipient is None
        assert m.channel in ("analysis", "commentary"), m.channel
    assert [m.channel for m in before] == sorted(
        (m.channel for m in before), key=("analysis", "commentary").index
    ), "analysis after a preamble"
    if tokens[-1] == st.CALL:
        _check_call(case, last)
    else:
        _check_final(case, last)
    return messages


def _check_call(case: Case, message: Message) -> None:
    tools = case.tools
    assert message.recipient in tools, f"undeclared recipient {message.recipient!r}"
    schema = tools[message.recipient]
    if schema is not None:
        assert message.channel in ("analysis", "commentary")
        jsonschema.validate(json.loads(message.text), schema)
    if message.recipient.startswith("functions."):
        assert message.channel == "commentary"
        assert message.content_type == "<|constrain|>json"


def _check_final(case: Case, message: Message) -> None:
    assert message.channel == "final" and message.recipient is None
    formats = case.response_formats
    if formats:
        answer = json.loads(message.text)
        errors = [list(jsonschema.Draft202012Validator(s).iter_errors(answer)) for s in formats]
        assert any(not e for e in errors), errors


def render_turn(messages: list[Message]) -> list[int]:
    """How harmonia renders a turn: each message, the first without ``<|start|>assistant``,
    a final answer ended by ``<|return|>`` (as the model writes it)."""
    tokens: list[int] = []
    for message in messages:
        tokens += ENC.render(message)
    tokens = tokens[2:]  # the prompt already ends with <|start|>assistant
    if messages[-1].channel == "final" and messages[-1].recipient is None:
        tokens[-1] = st.RETURN
    return tokens
