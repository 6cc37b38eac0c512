"""Differential fuzzing of rendering against the reference library (a developer tool).

    python tools/fuzz_render.py [N] [--seed S]

Builds N random conversations with the same code for both libraries, renders
them in every mode with harmonia and with ``openai_harmony`` and reports every
difference in token ids or in accept/refuse. Inputs harmonia refuses on purpose
(a ``RenderError`` where the reference renders: unreadable header fields, tool
names that declare nothing, invalid schemas; see the README) are counted apart.
Needs ``pip install -e '.[bench]'``; the reference runs offline from a vocabulary
file harmonia writes. Not part of
the test suite: the suite must not depend on the reference.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from types import ModuleType
from typing import Any

import harmonia

WORDS = [
    "weather",
    "Tokyo",
    "the",
    "and",
    "<|start|>",
    "<|end|>",
    "<|constrain|>",
    "json",
    "to=functions.f",
    "é😀",
    "\r\n",
    "\n",
    " ",
    "  ",
    "\t",
    "日本語",
    "analysis",
    "final",
    "<|channel|>",
    "a\u00a0b",
    "\x0b",
    "x" * 30,
    "// c",
    '{"a": 1}',
    "<|endoftext|>",
]


def text(rng: random.Random, n: int = 6) -> str:
    return "".join(
        rng.choice(WORDS) + rng.choice(["", " ", "\n"]) for _ in range(rng.randint(0, n))
    )


def opt(rng: random.Random, value: Any, p: float = 0.5) -> Any:
    return value if rng.random() < p else None


def schema(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["string", "number", "integer", "boolean", "array", "object", "null", "list"]
    kind = rng.choice(kinds if depth < 3 else kinds[:4])
    s: dict[str, Any] = {}
    if kind == "list":
        s["type"] = rng.sample(["string", "number", "integer", "null", "object"], rng.randint(1, 3))
    else:
        s["type"] = kind
    if kind == "string" and rng.random() < 0.4:
        s["enum"] = rng.sample(["a", "b", "c d", '"q"'], rng.randint(1, 3))
    if kind == "array" and rng.random() < 0.8:
        s["items"] = schema(rng, depth + 1)
    if kind == "object":
        props = {}
        for _ in range(rng.randint(0, 4)):
            props[rng.choice(["a", "b", "loc", "my-key", "x y", "n"])] = schema(rng, depth + 1)
        s["properties"] = props
        if props and rng.random() < 0.6:
            s["required"] = rng.sample(list(props), rng.randint(0, len(props)))
    if rng.random() < 0.4:
        s["description"] = text(rng, 3)
    if rng.random() < 0.2:
        s["title"] = text(rng, 2)
    if rng.random() < 0.2:
        s["nullable"] = rng.random() < 0.7
    if rng.random() < 0.3:
        s["default"] = rng.choice(
            [1, -1, 0.1, 1e16, 2**64, "x", 'say "hi"', True, None, [1, "a"], {"k": 1.5}, 1e-7]
        )
    if rng.random() < 0.1:
        s["examples"] = rng.sample(["e1", 2, "e 3"], rng.randint(0, 3))
    if rng.random() < 0.12 and depth < 2:
        s = {"oneOf": [schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]}
        if rng.random() < 0.5:
            s["description"] = text(rng, 2)
    return s


def tools(rng: random.Random, h: ModuleType) -> list[Any]:
    out = []
    for _ in range(rng.randint(0, 3)):
        params = rng.choice([None, {}, schema(rng), {"type": "object", "properties": {}}])
        if isinstance(params, dict) and rng.random() < 0.6:
            params = {"type": "object", "properties": {"p": schema(rng), "q": schema(rng)}}
        out.append(h.ToolDescription.new(rng.choice(["f", "get-x", "a.b"]), text(rng, 3), params))
    return out


def system(rng: random.Random, h: ModuleType) -> Any:
    s = h.SystemContent.new()
    if rng.random() < 0.3:
        s = s.with_model_identity(rng.choice(["", "A\nB", text(rng, 2)]))
    if rng.random() < 0.3:
        s.model_identity = None
    if rng.random() < 0.5:
        s = s.with_conversation_start_date(rng.choice(["2025-06-28", ""]))
    if rng.random() < 0.3:
        s.knowledge_cutoff = opt(rng, "2021-01")
    s.reasoning_effort = opt(rng, rng.choice(list(h.ReasoningEffort)), 0.8)
    if rng.random() < 0.3:
        s = s.with_required_channels(
            rng.sample(["analysis", "commentary", "final"], rng.randint(0, 3))
        )
    if rng.random() < 0.2:
        s.channel_config = opt(
            rng, h.ChannelConfig(valid_channels=["analysis"], channel_required=False)
        )
    if rng.random() < 0.3:
        s = s.with_browser_tool()
    if rng.random() < 0.3:
        s = s.with_python_tool()
    if rng.random() < 0.15:
        s = s.with_tools(
            h.ToolNamespaceConfig(name="functions", description=None, tools=tools(rng, h))
        )
    return s


def developer(rng: random.Random, h: ModuleType) -> Any:
    d = h.DeveloperContent.new()
    if rng.random() < 0.7:
        d = d.with_instructions(text(rng, 4))
    if rng.random() < 0.7:
        d = d.with_function_tools(tools(rng, h))
    if rng.random() < 0.2:
        d = d.with_tools(
            h.ToolNamespaceConfig(
                name=rng.choice(["zeta", "alpha", "functions"]),
                description=opt(rng, text(rng, 3)),
                tools=tools(rng, h),
            )
        )
    return d


def message(rng: random.Random, h: ModuleType) -> Any:
    r = rng.random()
    if r < 0.1:
        return h.Message.from_role_and_content(h.Role.SYSTEM, system(rng, h))
    if r < 0.2:
        return h.Message.from_role_and_content(h.Role.DEVELOPER, developer(rng, h))
    role = rng.choice([h.Role.USER, h.Role.ASSISTANT, h.Role.ASSISTANT, h.Role.TOOL])
    # Header fields: mostly ones harmonia renders, sometimes ones it refuses on purpose
    # (so most conversations still compare token ids).
    if role is h.Role.TOOL:
        author = h.Author.new(role, pick(rng, ["functions.f", "browser.search", "python"], [""]))
    else:
        author = h.Author.new(role, opt(rng, pick(rng, ["bob"], [""]), 0.15))
    m = h.Message.from_author_and_content(author, text(rng))
    if rng.random() < 0.15:
        m = m.adding_content(text(rng, 2))
    if rng.random() < 0.7:
        m = m.with_channel(pick(rng, ["analysis", "final", "commentary"], ["", "X  "]))
    if rng.random() < 0.35:
        m = m.with_recipient(pick(rng, ["functions.f", "assistant", "all", "python"], ["", "a b"]))
    if rng.random() < 0.25:
        usual = ["<|constrain|>json", "<|constrain|> json"]
        if m.recipient not in (None, "all"):
            usual += ["json", "code"]
        m = m.with_content_type(pick(rng, usual, ["", "<|constrain|>", "json"]))
    return m


def pick(rng: random.Random, usual: list[str], refused: list[str]) -> str:
    return rng.choice(refused if rng.random() < 0.02 else usual)


def conversation(seed: int, h: ModuleType) -> Any:
    rng = random.Random(seed)
    return h.Conversation.from_messages([message(rng, h) for _ in range(rng.randint(0, 8))])


def render_all(h: ModuleType, enc: Any, conv: Any) -> dict[str, Any]:
    keep = h.RenderConversationConfig(auto_drop_analysis=False)
    modes = {
        "completion": lambda: enc.render_conversation_for_completion(conv, h.Role.ASSISTANT),
        "keep": lambda: enc.render_conversation_for_completion(conv, h.Role.ASSISTANT, keep),
        "conversation": lambda: enc.render_conversation(conv),
        "training": lambda: enc.render_conversation_for_training(conv),
    }
    out: dict[str, Any] = {}
    for name, fn in modes.items():
        try:
            out[name] = list(fn())
        except Exception as exc:  # the reference raises several types
            out[name] = _error(exc)
    for i, m in enumerate(conv.messages):
        try:
            out[f"msg{i}"] = list(enc.render(m))
        except Exception as exc:
            out[f"msg{i}"] = _error(exc)
    return out


def _error(exc: Exception) -> str:
    if isinstance(exc, harmonia.RenderError):
        return f"error RenderError: {exc.reason}"
    return f"error {type(exc).__name__}"


def _deliberate(wanted: object, got: object) -> bool:
    """harmonia refused with a RenderError where the reference rendered."""
    return isinstance(wanted, list) and isinstance(got, str) and "RenderError" in got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    vocab = tempfile.mkdtemp()
    harmonia.write_tiktoken_file(vocab)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = vocab
    import openai_harmony as ref

    renc = ref.load_harmony_encoding(ref.HarmonyEncodingName.HARMONY_GPT_OSS)
    henc = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
    bad = 0
    refused: dict[str, int] = {}
    for k in range(args.n):
        seed = args.seed + k
        want = render_all(ref, renc, conversation(seed, ref))
        got = render_all(harmonia, henc, conversation(seed, harmonia))
        for mode in want:
            w, g = want[mode], got.get(mode)
            same = (isinstance(w, str) and isinstance(g, str)) or w == g
            if not same and _deliberate(w, g):
                reason = str(g).split(": ", 1)[1].split("'")[0]
                refused[reason] = refused.get(reason, 0) + 1
            elif not same:
                bad += 1
                if bad <= 10:
                    print(f"seed {seed} {mode}: got {str(g)[:200]}\n   want {str(w)[:200]}")
                    if isinstance(w, list) and isinstance(g, list):
                        i = next(
                            (j for j, (a, b) in enumerate(zip(g, w, strict=False)) if a != b),
                            min(len(g), len(w)),
                        )
                        print("   near", repr(renc.decode_utf8(w[max(0, i - 8) : i + 8])))
    for reason, count in sorted(refused.items(), key=lambda item: -item[1]):
        print(f"refused on purpose ({count}): {reason}...")
    print(f"{args.n} conversations, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
