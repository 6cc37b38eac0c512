"""Property: what is sampled under the mask is what the schema says, whoever parses it.

Turns are sampled token by token under the mask from random logits that favour
the tokens that break JSON soundness: backslashes (escaped keys), quotes and a
few short key words (repeated keys), whitespace (before a value), and the
special tokens outside the format (``<|endoftext|>``). The schemas leave
``additionalProperties`` open (the docs' quick-start tool, the browser's
built-in schemas), ask for ``minProperties``, the final answer has several
response formats, and analysis messages have a token budget. Every sampled
tool argument and structured answer must

* parse with ``json.loads`` and validate with ``jsonschema``,
* hold no repeated key (so every parser reads the same object) and no escape
  inside a key (so keys read as written),

and no mask, at any step, may allow a special token outside the seven the
format uses. Seeded, bounded: a few seconds.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

import harmonia as h
from harmonia import Conversation, DeveloperContent, Message, Role, SystemContent

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from harmonia.constrained import (  # noqa: E402
    HARMONY_SPECIAL_TOKENS,
    MASK_WORDS,
    GrammarOptions,
    TurnMatcher,
)

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
FIRST_SPECIAL = 199_998
VOCAB = 201_089
TURNS = 40  # per conversation
BUDGET_S = 12.0  # per conversation; the test stops early rather than run long

WEATHER = {  # the docs' quick start: additionalProperties left open
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TAGS = {"type": "object", "minProperties": 2, "maxProperties": 4}
LABELS = {
    "type": "object",
    "properties": {"id": {"type": "integer"}},
    "required": ["id"],
    "patternProperties": {"^x": {"type": "string", "maxLength": 3}},
    "minProperties": 3,
    "additionalProperties": False,
}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
    "minProperties": 2,
}


def _conversation(system: SystemContent, developer: DeveloperContent) -> Conversation:
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, system),
            Message.from_role_and_content(Role.DEVELOPER, developer),
            Message.from_role_and_content(Role.USER, "Go."),
        ]
    )


CONVERSATIONS = {
    "open_objects": _conversation(
        SystemContent.new(),
        DeveloperContent.new().with_function_tools(
            [
                h.ToolDescription.new("get_weather", "Weather.", WEATHER),
                h.ToolDescription.new("tag", "Tags.", TAGS),
                h.ToolDescription.new("label", "Labels.", LABELS),
            ]
        ),
    ),
    "formats_and_browser": _conversation(
        SystemContent.new().with_browser_tool(),
        DeveloperContent.new()
        .with_response_format("point", POINT)
        .with_response_format("count", {"type": "integer", "minimum": 0})
        .with_response_format("free", {"type": "object", "minProperties": 2}),
    ),
}
OPTIONS = GrammarOptions(analysis_max_tokens=6, json_max_whitespace=2)


def _depth(b: bytes) -> int:
    return sum(b.count(c) for c in b"[{") - sum(b.count(c) for c in b"]}")


def _ids(predicate: Any) -> list[int]:
    table = ENC.tokenizer.token_bytes_table
    return [i for i, b in enumerate(table[:FIRST_SPECIAL]) if predicate(b)]


_JSON_CHARS = set(b"{}[],:0123456789 ")
# Token classes (the first that claims a token keeps it) and their bias ranges (log units).
CLASSES: dict[str, tuple[list[int], tuple[float, float]]] = {
    "special": (list(range(FIRST_SPECIAL, VOCAB)), (2.0, 12.0)),
    "backslash": (_ids(lambda b: b"\\" in b), (3.0, 9.0)),
    "keyish": ([ENC.encode_ordinary(w)[0] for w in ("a", "x", "city", "id", "xa")], (3.0, 8.0)),
    "quote": (_ids(lambda b: b'"' in b and _depth(b) <= 0), (4.0, 8.0)),
    "close": (_ids(lambda b: len(b) <= 3 and set(b) <= _JSON_CHARS and _depth(b) < 0), (6, 9)),
    "open": (_ids(lambda b: len(b) <= 3 and set(b) <= _JSON_CHARS and _depth(b) > 0), (0, 3)),
    "punct": (_ids(lambda b: len(b) <= 2 and set(b) <= _JSON_CHARS and _depth(b) == 0), (3, 7)),
    "space": (_ids(lambda b: b.isspace()), (-2.0, 3.0)),
}


def _class_masks() -> dict[str, np.ndarray]:
    taken = np.zeros(MASK_WORDS * 32, dtype=np.bool_)
    masks = {}
    for name, (ids, _) in CLASSES.items():
        bits = np.zeros(MASK_WORDS * 32, dtype=np.bool_)
        bits[ids] = True
        bits &= ~taken
        taken |= bits
        masks[name] = np.packbits(bits, bitorder="little").view(np.uint32)
    rest = ~taken
    rest[VOCAB:] = False
    masks["rest"] = np.packbits(rest, bitorder="little").view(np.uint32)
    return masks


class AdversarialSampler:
    """argmax of (class bias + Gumbel noise) over the allowed tokens, in closed form:
    a class with probability proportional to exp(bias) x its allowed tokens, then one
    of those uniformly (a step costs tens of microseconds, not a 201,088-logit pass)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.classes = _class_masks()
        self.ranges = {name: r for name, (_, r) in CLASSES.items()} | {"rest": (0.0, 0.0)}

    def sample(self, matcher: TurnMatcher, max_tokens: int = 800) -> list[int]:
        mask = np.zeros(MASK_WORDS, dtype=np.int32)
        while not matcher.is_finished:
            assert len(matcher.tokens) < max_tokens, "the turn did not end"
            matcher.fill_mask(mask)
            assert_no_foreign_special(mask)
            matcher.consume(self.pick(mask.view(np.uint32)))
        return list(matcher.tokens)

    def pick(self, mask: np.ndarray) -> int:
        within = {name: mask & cm for name, cm in self.classes.items()}
        counts = {name: int(np.bitwise_count(m).sum()) for name, m in within.items()}
        names = [n for n in counts if counts[n]]
        assert names, "the mask allows nothing"
        weights = np.array([np.exp(self.rng.uniform(*self.ranges[n])) * counts[n] for n in names])
        chosen = within[names[int(self.rng.choice(len(names), p=weights / weights.sum()))]]
        allowed = np.flatnonzero(np.unpackbits(chosen.view(np.uint8), bitorder="little"))
        return int(allowed[self.rng.integers(allowed.size)])


def assert_no_foreign_special(mask: np.ndarray) -> None:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[FIRST_SPECIAL:VOCAB]
    allowed = {FIRST_SPECIAL + int(i) for i in np.flatnonzero(bits)}
    assert allowed <= HARMONY_SPECIAL_TOKENS, sorted(allowed - HARMONY_SPECIAL_TOKENS)


def strict_loads(text: str) -> Any:
    """json.loads, refusing a repeated key; keys must also read as they are written."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        assert len(set(keys)) == len(keys), f"repeated key in {text!r}"
        for key in keys:
            assert json.dumps(key, ensure_ascii=False)[1:-1] in text, f"escaped key in {text!r}"
        return dict(items)

    return json.loads(text, object_pairs_hook=pairs)


def schemas(conv: Conversation) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    tools: dict[str, dict[str, Any]] = {}
    formats: list[dict[str, Any]] = []
    for message in conv.messages:
        for part in message.content:
            if isinstance(part, (SystemContent, DeveloperContent)):
                for ns in (part.tools or {}).values():
                    for tool in ns.tools:
                        tools[f"{ns.name}.{tool.name}"] = tool.parameters or {}
            if isinstance(part, DeveloperContent):
                formats += [fmt.schema for fmt in part.response_formats or ()]
    return tools, formats


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_sampled_json_is_what_the_schema_says(name: str) -> None:
    conv = CONVERSATIONS[name]
    tools, formats = schemas(conv)
    base = TurnMatcher.from_conversation(conv, OPTIONS)
    sampler = AdversarialSampler(seed=len(name))
    started = time.perf_counter()
    checked = 0
    for _ in range(TURNS):
        if time.perf_counter() - started > BUDGET_S:
            break
        tokens = sampler.sample(base.copy())
        last = ENC.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT)[-1]
        if last.recipient is not None:
            assert last.recipient in tools
            jsonschema.validate(strict_loads(last.text), tools[last.recipient])
        elif formats:
            value = strict_loads(last.text)
            assert any(jsonschema.Draft202012Validator(f).is_valid(value) for f in formats)
        checked += 1
    print(f"{name}: {checked} turns in {time.perf_counter() - started:.1f} s")
    assert checked >= 10, f"only {checked} turns in {BUDGET_S} s"
