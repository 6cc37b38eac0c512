"""The ``hf`` dialect against the gpt-oss Hugging Face chat template rendered with jinja2."""

from __future__ import annotations

import importlib.util
import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harmonia import HarmonyEncoding, MessageSpans
from harmonia._render.cot import dropped_indices
from harmonia.training._hf_template import render_hf

jinja2 = pytest.importorskip("jinja2", reason="jinja2 (the dev extra) renders the template")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402


def _trl_template(name: str) -> str:
    """A chat template as the ``trl`` package ships it (read, never imported: only the file
    is needed, so CI installs it with ``pip install --no-deps``). Its ``gptoss.jinja`` is
    the gpt-oss checkpoints' chat template; ``gptoss_training.jinja`` TRL's variant with
    ``{% generation %}`` blocks for ``assistant_only_loss``."""
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        pytest.skip(
            "the gpt-oss chat template is read from the trl package: pip install --no-deps trl",
            allow_module_level=True,
        )
    return (Path(spec.origin).parent / "chat_templates" / name).read_text("utf-8")


TEMPLATE = _trl_template("gptoss.jinja")
DATE = "2025-08-01"


def template_text(row: dict[str, Any], add_generation_prompt: bool = False) -> str:
    """What transformers' apply_chat_template writes (its environment, the date pinned)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = (
        lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )
    )

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.strptime(DATE, "%Y-%m-%d").strftime(fmt)
    kwargs = row.get("chat_template_kwargs", {})
    return env.from_string(TEMPLATE).render(
        messages=row["messages"],
        tools=[t for t in row.get("tools", [])] or None,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )


def weather(parameters: dict[str, Any], description: str = "Gets the weather.") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": "get_weather", "description": description, "parameters": parameters},
    }


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
CASES: dict[str, dict[str, Any]] = {
    "user-only": {"messages": [{"role": "user", "content": "Hi"}]},
    "instructions-no-tools": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "thinking": "Greet back."},
        ]
    },
    "defaults-and-enums": {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [
            weather(
                {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "The city"},
                        "unit": {
                            "type": "string",
                            "enum": ["celsius", "fahrenheit"],
                            "default": "celsius",
                        },
                        "days": {"type": "integer", "default": 3},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "flag": {"type": "boolean", "nullable": True},
                        "any": {},
                    },
                    "required": ["city"],
                }
            )
        ],
    },
    "nested-objects-and-arrays": {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [
            weather(
                {
                    "type": "object",
                    "properties": {
                        "filters": {
                            "type": "object",
                            "properties": {"lang": {"type": "string"}, "year": {"type": "number"}},
                            "required": ["lang"],
                        },
                        "points": {
                            "type": "array",
                            "items": {"type": "object", "properties": {"x": {"type": "number"}}},
                        },
                        "kinds": {"type": ["string", "number"]},
                        "raw": {"type": "array"},
                    },
                }
            )
        ],
    },
    "one-of-and-empty-properties": {
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": [
            weather(
                {
                    "type": "object",
                    "properties": {
                        "mode": {
                            "oneOf": [
                                {"type": "string", "description": "a name"},
                                {"type": "number", "default": 1},
                            ]
                        }
                    },
                }
            ),
            {
                "type": "function",
                "function": {
                    "name": "get_time",
                    "description": "Now.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
    },
    "tool-round-trip": {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "thinking": "Need the tool.", "tool_calls": [CALL]},
            {"role": "tool", "content": "3 degrees"},
            {"role": "assistant", "thinking": "Cold.", "content": "3 degrees."},
        ],
        "tools": [weather(CITY)],
    },
    "string-arguments-and-parallel-calls": {
        "messages": [
            {"role": "user", "content": "Two cities?"},
            {
                "role": "assistant",
                "content": "Calling.",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                    CALL,
                ],
            },
            {"role": "tool", "content": "3"},
        ],
        "tools": [weather(CITY)],
    },
    "multi-turn-thinking": {
        "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "thinking": "T1", "content": "A1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "thinking": "T2", "content": "A2"},
        ]
    },
    "builtins-effort-identity": {
        "messages": [{"role": "user", "content": "Search"}, {"role": "assistant", "content": "ok"}],
        "chat_template_kwargs": {
            "reasoning_effort": "high",
            "builtin_tools": ["browser", "python"],
            "model_identity": "You are a tester.",
        },
    },
    "non-ascii": {
        "messages": [
            {"role": "developer", "content": "Réponds en français."},
            {"role": "user", "content": "東京の天気は？ 🙂"},
            {
                "role": "assistant",
                "thinking": "Il faut répondre.",
                "content": "Il fait beau — 20 °C.",
            },
        ]
    },
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ids_equal_the_template(enc: HarmonyEncoding, name: str) -> None:
    row = CASES[name]
    expected = enc.encode(template_text(row), allowed_special="all")
    ids, records, messages, _, _ = render_hf(row, enc, date=DATE)
    spans = MessageSpans(records)
    assert enc.decode(ids) == enc.decode(expected)
    assert ids == expected
    # The spans tile the ids and name the right messages.
    assert spans[0].start == 0 and spans[-1].stop == len(ids)
    assert all(a.stop == b.start for a, b in itertools.pairwise(spans))
    for span in spans:
        assert span.message_index is not None
        m = messages[span.message_index]
        body = enc.decode(ids[span.message + 1 : span.end])
        if m.author.role.value not in ("system",):
            assert body == getattr(m.content[0], "text", None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_template_drops_what_the_hf_policy_drops(enc: HarmonyEncoding, name: str) -> None:
    """The reasoning the template leaves out is the core's ``hf`` CoT policy's."""
    _, _, messages, dropped, _ = render_hf(CASES[name], enc, date=DATE)
    assert dropped == dropped_indices(messages, "hf", training=True)


def test_generation_prompt(enc: HarmonyEncoding) -> None:
    row = CASES["multi-turn-thinking"]
    expected = enc.encode(template_text(row, add_generation_prompt=True), allowed_special="all")
    assert render_hf(row, enc, date=DATE, add_generation_prompt=True)[0] == expected


def test_the_template_is_not_harmony(enc: HarmonyEncoding) -> None:
    """The dialect exists because the template differs: a few of the differences."""
    nested = template_text(CASES["nested-objects-and-arrays"])
    assert (
        "filters?: {\nlang: \n                string, year?: \n                number}," in nested
    )
    call = template_text(CASES["string-arguments-and-parallel-calls"])
    assert '<|message|>"{\\"city\\": \\"Oslo\\"}"<|call|>' in call  # encoded twice
    assert call.count("<|call|>") == 1  # the second call is dropped
    assert '<|message|>"3"<|end|>' in call  # the result is JSON-quoted


TRAINING_TEMPLATE = _trl_template("gptoss_training.jinja")


def char_runs(enc: HarmonyEncoding, ids: list[int], mask: bytes) -> list[tuple[int, int]]:
    """The trained character ranges of the decoded ids, merged."""
    runs: list[tuple[int, int]] = []
    at = 0
    for token, trained in zip(ids, mask, strict=True):
        size = len(enc.decode([token]))
        if trained:
            if runs and runs[-1][1] == at:
                runs[-1] = (runs[-1][0], at + size)
            else:
                runs.append((at, at + size))
        at += size
    return runs


@pytest.mark.parametrize(
    "name", ["tool-round-trip", "multi-turn-thinking", "instructions-no-tools"]
)
def test_trl_preset_trains_what_trl_trains(enc: HarmonyEncoding, name: str) -> None:
    """TRL's assistant_only_loss mask (its generation blocks) equals the trl preset's."""
    utils = pytest.importorskip(
        "transformers.utils.chat_template_utils", reason="transformers is not installed"
    )
    from harmonia.training import render_hf_for_training

    row = CASES[name]
    rendered, generation = utils.render_jinja_template(
        conversations=[row["messages"]],
        tools=row.get("tools"),
        chat_template=TRAINING_TEMPLATE,
        return_assistant_tokens_mask=True,
    )
    today = datetime.now().strftime("%Y-%m-%d")  # the template's strftime_now
    [sample] = render_hf_for_training(row, enc, "trl", date=today)
    assert enc.decode(sample.input_ids) == rendered[0]
    expected = [tuple(span) for span in generation[0]]
    assert char_runs(enc, sample.input_ids, sample.loss_mask) == expected


def test_hf_dialect_in_the_batch_function() -> None:
    from harmonia import InputError
    from harmonia.training import InputOptions, render_batch

    with pytest.raises(InputError, match="date"):
        InputOptions(dialect="hf")
    rows = [json.dumps(CASES["tool-round-trip"]), json.dumps({"messages": "nope"})]
    batch = render_batch(rows, policy="trl", options=InputOptions(dialect="hf", date=DATE))
    assert batch.stats.formats == {"hf": 1} and [p.code for p in batch.problems] == ["E102"]
    assert len(batch.input_ids) == 1 and 1 in batch.loss_mask[0]
    missing = render_batch(rows[:1], options=InputOptions(dialect="hf", date="from-row"))
    assert [p.code for p in missing.problems] == ["E150"]  # the row has no date


def marker_runs(text: str, pattern: str) -> list[tuple[int, int]]:
    """Character ranges found the way the stacks find them: by markers in the text."""
    import re

    return [(m.start(1), m.end(1)) for m in re.finditer(pattern, text, re.S)]


MARKER_CASES = ["tool-round-trip", "multi-turn-thinking", "instructions-no-tools", "non-ascii"]


@pytest.mark.parametrize("name", MARKER_CASES)
def test_megatron_and_unsloth_presets_match_their_markers(enc: HarmonyEncoding, name: str) -> None:
    """Megatron-Bridge trains from after <|start|>assistant through the end token;
    Unsloth's train_on_responses_only from after the final header to the next user."""
    from harmonia.training import render_hf_for_training

    row = CASES[name]
    text = template_text(row)
    megatron = marker_runs(text, r"<\|start\|>assistant(.*?(?:<\|end\|>|<\|call\|>|<\|return\|>))")
    [sample] = render_hf_for_training(row, enc, "megatron", date=DATE)
    assert char_runs(enc, sample.input_ids, sample.loss_mask) == megatron
    unsloth = marker_runs(
        text, r"<\|start\|>assistant<\|channel\|>final<\|message\|>(.*?)(?=<\|start\|>user|$)"
    )
    [sample] = render_hf_for_training(row, enc, "final-only", date=DATE)
    assert char_runs(enc, sample.input_ids, sample.loss_mask) == unsloth
