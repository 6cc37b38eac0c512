"""Differential checks against the reference (openai_harmony 0.0.8), when it is installed.

The reference needs its vocabulary offline: ``TIKTOKEN_ENCODINGS_BASE`` names a
directory holding ``o200k_base.tiktoken``; when it is not set, harmonia writes
that file to a temporary directory.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from typing import Any

import pytest

import harmonia as h
from harmonia._parse.header import is_tool_name

oh = pytest.importorskip("openai_harmony")
if "TIKTOKEN_ENCODINGS_BASE" not in os.environ:
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = os.path.dirname(
        h.write_tiktoken_file(tempfile.mkdtemp(prefix="harmonia-vocab-"))
    )

try:
    REF = oh.load_harmony_encoding("HarmonyGptOss")
except Exception as exc:  # no vocabulary available offline
    pytest.skip(f"reference vocabulary unavailable: {exc}", allow_module_level=True)
OURS = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)

N_CASES = int(os.environ.get("HARMONIA_DIFFERENTIAL_CASES", "300"))
TEXTS = ["Hello", " world", "2 + 2", "é", "💖", "日本語", " ", "\n", "a<|start|>b", '{"a": 1}']
CHANNELS = ["analysis", "commentary", "final", None, "weird"]
RECIPIENTS = [None, None, "functions.get_weather", "browser.search", "python", "functions.x-y"]
CONTENT_TYPES = [None, "json", "code", "<|constrain|>json", "<|constrain|> json"]
INSERTS = [200006, 200007, 200008, 200005, 200003, 200002, 200012, 199999, 200013, 9552, 31446, 244]
INSERTS += [250000, 2**32 - 1]  # unknown ids


def random_completion(rng: random.Random) -> tuple[Any, list[int]]:
    role = rng.choice([oh.Role.ASSISTANT, None])
    tokens: list[int] = []
    for _ in range(rng.randint(1, 4)):
        text = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 5)))
        m = oh.Message.from_role_and_content(oh.Role.ASSISTANT, text)
        channel = rng.choice(CHANNELS)
        if channel:
            m = m.with_channel(channel)
        recipient = rng.choice(RECIPIENTS)
        if recipient:
            m = m.with_recipient(recipient)
            content_type = rng.choice(CONTENT_TYPES)
            if content_type:
                m = m.with_content_type(content_type)
        tokens += REF.render(m)
    if role is not None:
        tokens = tokens[2:]  # the prompt ended with <|start|>assistant
    if rng.random() < 0.5:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(tokens) + 1)
            op = rng.random()
            if op < 0.4 and tokens:
                del tokens[min(i, len(tokens) - 1)]
            elif op < 0.8:
                tokens.insert(i, rng.choice(INSERTS))
            else:
                tokens = tokens[:i]
    return role, tokens


def norm(messages: Any) -> Any:
    return [{k: v for k, v in m.to_dict().items() if v is not None} for m in messages]


def as_json(messages: Any) -> Any:
    return json.loads(json.dumps(norm(messages)))


def bogus(messages: Any) -> bool:
    """A reading harmonia's strict mode refuses on purpose (junk the reference accepts)."""
    for m in messages:
        name = m.get("name")
        if m.get("role") == "tool" and name != "tool" and not is_tool_name(name or ""):
            return True
        for key in ("name", "channel", "recipient", "content_type"):
            value = m.get(key)
            if (
                isinstance(value, str)
                and "<|" in value
                and not (key == "content_type" and value.startswith("<|constrain|>"))
            ):
                return True
    return False


def _refusal(error: str) -> bool:
    """One of harmonia's own refusals of a header the reference reads."""
    return error.startswith("special token in the message header") or (
        error.startswith("Unknown role:") and "nor a tool name" in error
    )


def trace(parser: Any, tokens: list[int]) -> tuple[list[tuple[Any, ...]], Any]:
    rows: list[tuple[Any, ...]] = []
    for t in tokens:
        try:
            parser.process(t)
            error = None
        except Exception as exc:
            error = str(exc)
        role = parser.current_role
        rows.append(
            (
                error,
                parser.state.value,
                role.value if role else None,
                parser.current_channel,
                parser.current_recipient,
                parser.current_content_type,
                parser.last_content_delta,
                parser.current_content,
            )
        )
    try:
        parser.process_eos()
    except Exception as exc:
        rows.append((str(exc),))
    return rows, as_json(parser.messages)


def batch(enc: Any, tokens: list[int], role: Any, strict: bool) -> Any:
    try:
        return as_json(enc.parse_messages_from_completion_tokens(tokens, role, strict=strict))
    except (h.HarmonyError, oh.HarmonyError) as exc:
        return ("error", str(exc))


def test_differential() -> None:
    rng = random.Random(20250101)
    compared = {"trace": 0, "strict": 0, "lenient": 0, "errors": 0}
    for _ in range(N_CASES):
        role, tokens = random_completion(rng)
        our_role = h.Role(role.value) if role else None
        clean = all(0 <= t <= 201088 for t in tokens)  # harmonia keeps text after unknown ids
        ref_strict = batch(REF, tokens, role, True)
        got_strict = batch(OURS, tokens, our_role, True)
        if isinstance(ref_strict, list) and not bogus(ref_strict):
            assert got_strict == ref_strict, (role, tokens)
            compared["strict"] += 1
            # Same per-token trace (invalid bytes included) wherever the
            # reference reads every header sensibly.
            ref_rows, _ = trace(oh.StreamableParser(REF, role), tokens)
            our_rows, _ = trace(h.StreamableParser(OURS, our_role), tokens)
            assert our_rows == ref_rows, (role, tokens)
            compared["trace"] += 1
        else:
            # Where the reference raises, harmonia raises the same error at the same
            # token, unless one of its fixes read the header (never earlier).
            # Where the reference reads junk, harmonia may refuse it earlier.
            ref_rows, _ = trace(oh.StreamableParser(REF, role), tokens)
            our_rows, _ = trace(h.StreamableParser(OURS, our_role), tokens)
            ref_first = next((i for i, r in enumerate(ref_rows) if r[0]), len(ref_rows))
            our_first = next((i for i, r in enumerate(our_rows) if r[0]), len(our_rows))
            if isinstance(ref_strict, list):
                # Junk: refused, or read by one of harmonia's fixes; never junk.
                assert isinstance(got_strict, tuple) or not bogus(got_strict), (role, tokens)
            elif our_first < ref_first:
                # Junk read by the reference at a header, refused by harmonia.
                assert ref_rows[our_first][1] == "Content", (role, tokens)
                assert _refusal(our_rows[our_first][0]), (role, tokens)
            if our_first == ref_first < len(ref_rows):
                assert our_rows[our_first][0] == ref_rows[ref_first][0], (role, tokens)
                compared["errors"] += 1
        ref_lenient = batch(REF, tokens, role, False)
        got_lenient = batch(OURS, tokens, our_role, False)
        assert isinstance(got_lenient, list)
        if isinstance(ref_lenient, list) and not bogus(ref_lenient) and clean:
            result = h.parse_completion(OURS, tokens, our_role, strict=False)
            extended = any(
                d.kind is h.RecoveryKind.MISSING_MESSAGE and d.kept is not None
                for d in result.diagnostics
            )
            if not extended:  # harmonia keeps text the reference drops
                assert got_lenient == ref_lenient, (role, tokens)
                compared["lenient"] += 1
    assert min(compared.values()) > N_CASES // 10, compared
