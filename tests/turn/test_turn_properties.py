"""Properties of the turn layer over random outputs, split anywhere into tokens."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harmonia
from harmonia import OutputAssembler, RecoveryKind, Role, TurnEnd, parse_completion

ENC = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)

HEADERS = {
    "analysis": ("<|channel|>analysis<|message|>", "<|end|>"),
    "preamble": ("<|channel|>commentary<|message|>", "<|end|>"),
    "final": ("<|channel|>final<|message|>", "<|return|>"),
    "call": ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "<|call|>"),
    "python": ("<|channel|>analysis to=python code<|message|>", "<|call|>"),
}
KINDS = {"analysis": "reasoning", "preamble": "text", "final": "text", "call": "call"}
KINDS["python"] = "call"
TEXTS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
MESSAGES = st.lists(st.tuples(st.sampled_from(sorted(HEADERS)), TEXTS), min_size=1, max_size=4)
# How the output ends: its last stop token, none (cut off), or cut inside the last message.
ENDINGS = st.sampled_from(["stop", "none", "cut"])


def output_tokens(messages: list[tuple[str, str]], ending: str) -> list[int]:
    tokens: list[int] = []
    for n, (kind, text) in enumerate(messages):
        head, stop = HEADERS[kind]
        last = n == len(messages) - 1
        if not last and stop != "<|end|>":
            stop = "<|end|>"  # only the last message may end the turn
        prefix = "" if n == 0 else "<|start|>assistant"
        tokens += ENC.encode(prefix + head, allowed_special="all")
        body = ENC.encode_ordinary(text)
        if last and ending == "cut":
            body = body[: max(1, len(body) // 2)]
        tokens += body
        if not last or ending == "stop":
            tokens += ENC.encode(stop, allowed_special="all")
    return tokens


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=MESSAGES, ending=ENDINGS)
def test_items_messages_and_end_follow_the_tokens(
    messages: list[tuple[str, str]], ending: str
) -> None:
    tokens = output_tokens(messages, ending)
    asm = OutputAssembler(ENC)
    streamed: dict[int, str] = {}
    events = [event for token in tokens for event in asm.feed(token)] + asm.finish()
    for event in events:
        if isinstance(event, harmonia.ItemDelta):
            streamed[event.item.index] = streamed.get(event.item.index, "") + event.text
    summary = asm.summary
    # One item per message, of the right kind, with the parser's message.
    assert [i.kind for i in summary.items] == [KINDS[k] for k, _ in messages]
    parsed = parse_completion(ENC, tokens, Role.ASSISTANT, strict=False)
    assert [i.message for i in summary.items] == parsed.messages
    assert all(streamed.get(i.index, "") == i.text for i in summary.items)
    assert sum(i.tokens for i in summary.items) == summary.output_tokens == len(tokens)
    # The end: the last stop token, or cut off with exactly one diagnostic.
    last_stop = HEADERS[messages[-1][0]][1]
    expected = {"<|return|>": TurnEnd.RETURN, "<|call|>": TurnEnd.CALL, "<|end|>": TurnEnd.END}
    if ending == "stop":
        assert summary.end is expected[last_stop] and summary.diagnostics == ()
    else:
        assert summary.end is TurnEnd.TRUNCATED and summary.items[-1].truncated
        truncated = [d for d in summary.diagnostics if d.kind is RecoveryKind.TRUNCATED]
        assert len(truncated) == 1
