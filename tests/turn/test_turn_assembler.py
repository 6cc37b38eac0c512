"""The turn layer: items, their classification, the messages they carry, streaming events."""

from __future__ import annotations

import pytest

import harmonia
from harmonia import (
    HarmonyEncoding,
    InputError,
    ItemAdded,
    ItemDelta,
    ItemDone,
    Message,
    OutputAssembler,
    OutputEvent,
    RecoveryKind,
    Role,
    parse_completion,
)


def run(
    enc: HarmonyEncoding, text: str, finished: bool | None = None
) -> tuple[OutputAssembler, list[OutputEvent]]:
    asm = OutputAssembler(enc)
    events: list[OutputEvent] = []
    for token in enc.encode(text, allowed_special="all"):
        events += asm.feed(token)
    events += asm.finish(finished=finished)
    return asm, events


CALL = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"


@pytest.mark.parametrize(
    ("text", "kind", "phase", "recipient", "content_type"),
    [
        (CALL + '{"city":"Paris"}<|call|>', "call", "final", "functions.get_weather", "json"),
        (
            "<|channel|>analysis to=browser.search code<|message|>{}<|call|>",
            "call",
            "final",
            "browser.search",
            "code",
        ),
        (
            "<|channel|>analysis to=python code<|message|>1+1<|call|>",
            "call",
            "final",
            "python",
            "code",
        ),
        # The model dropped ``functions.``: a bare word on commentary is still a call.
        (
            "<|channel|>commentary to=get_time<|message|>{}<|call|>",
            "call",
            "final",
            "get_time",
            None,
        ),
        ("<|channel|>analysis<|message|>Hm.<|end|>", "reasoning", "final", None, None),
        ("<|channel|>commentary<|message|>Checking.<|end|>", "text", "commentary", None, None),
        ("<|channel|>final<|message|>4<|return|>", "text", "final", None, None),
        # A content-type word is not a recipient.
        ('<|channel|>final json<|message|>{"a":1}<|return|>', "text", "final", None, "json"),
        ("<|channel|>commentary json<|message|>{}<|end|>", "text", "commentary", None, "json"),
        ("<|channel|>analysis code<|message|>x = 1<|end|>", "reasoning", "final", None, "code"),
        # ``to=all`` addresses everyone: not a call.
        ("<|channel|>commentary to=all<|message|>Hi<|end|>", "text", "commentary", None, None),
    ],
)
def test_each_message_becomes_one_classified_item(
    enc: HarmonyEncoding,
    text: str,
    kind: str,
    phase: str,
    recipient: str | None,
    content_type: str | None,
) -> None:
    asm, _ = run(enc, text)
    [item] = asm.items
    assert (item.kind, item.phase, item.recipient) == (kind, phase, recipient)
    assert (item.content_type or "").removeprefix("<|constrain|>") == (content_type or "")


def test_model_mistakes_are_diagnosed_with_their_kind(enc: HarmonyEncoding) -> None:
    cases = {
        "<|channel|>final<|message|>H<|constrain|>i<|return|>": (
            RecoveryKind.SPECIAL_TOKEN_IN_CONTENT
        ),
        "<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b<|return|>": (
            RecoveryKind.MISSING_END
        ),
        "<|channel|>loud<|message|>b<|return|>": RecoveryKind.UNKNOWN_CHANNEL,
        "<|channel|>final json<|message|>{}<|return|>": RecoveryKind.CONTENT_TYPE_AS_RECIPIENT,
        (
            CALL + "{}<|end|><|start|>functions.get_weather to=assistant<|channel|>commentary"
            "<|message|>made up<|end|><|start|>assistant<|channel|>final<|message|>x<|return|>"
        ): RecoveryKind.FOREIGN_AUTHOR,
    }
    for text, kind in cases.items():
        asm, _ = run(enc, text)
        kinds = [d.kind for d in asm.diagnostics]
        assert kind in kinds, (text, kinds)
        assert all(isinstance(k, harmonia.RecoveryKind) for k in kinds)
        # The kinds stay the strings they always were, in str() and in JSON.
        assert str(kind) == kind.value and f"{kind}" == kind.value
        assert all(str(d).startswith(d.kind.value) for d in asm.diagnostics)
        assert "<|" not in "".join(i.text for i in asm.items)


def test_a_clean_turn_has_no_diagnostics(enc: HarmonyEncoding) -> None:
    asm, _ = run(
        enc, "<|channel|>analysis<|message|>a<|end|><|start|>assistant" + CALL + "{}<|call|>"
    )
    assert asm.diagnostics == []


def test_each_item_carries_the_message_the_parser_read(enc: HarmonyEncoding) -> None:
    text = (
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant" + CALL + '{"city": "東京"}<|call|>'
    )
    asm, _ = run(enc, text)
    parsed = parse_completion(enc, enc.encode(text, allowed_special="all"), Role.ASSISTANT)
    assert [i.message for i in asm.items] == parsed.messages
    call = asm.items[1]
    assert isinstance(call.message, Message)
    assert call.message.recipient == "functions.get_weather"
    assert call.message.content_type == "<|constrain|>json"
    assert call.message.text == '{"city": "東京"}' == call.text
    assert call.name == "get_weather"
    # The message re-renders to the tokens sampled (what a loop appends to the history).
    rendered = enc.render(call.message)
    assert enc.decode_utf8(rendered).endswith('{"city": "東京"}<|call|>')


def test_items_record_their_stop_token_and_tokens(enc: HarmonyEncoding) -> None:
    text = (
        "<|channel|>analysis<|message|>a b c<|end|>"
        "<|start|>assistant<|channel|>final<|message|>d<|return|>"
    )
    asm, _ = run(enc, text)
    ids = [enc.encode(t, allowed_special="all")[0] for t in ("<|end|>", "<|return|>")]
    assert [i.stop_token for i in asm.items] == ids
    assert (
        sum(i.tokens for i in asm.items)
        == asm.token_count
        == len(enc.encode(text, allowed_special="all"))
    )
    first = enc.encode("<|channel|>analysis<|message|>a b c<|end|>", allowed_special="all")
    assert asm.items[0].tokens == len(first)


def test_events_announce_fill_and_finish_each_item(enc: HarmonyEncoding) -> None:
    asm, events = run(
        enc,
        "<|channel|>analysis<|message|>one two<|end|><|start|>assistant"
        "<|channel|>final<|message|>three<|return|>",
    )
    for item in asm.items:
        mine = [e for e in events if e.item is item]
        assert isinstance(mine[0], ItemAdded) and isinstance(mine[-1], ItemDone)
        deltas = [e.text for e in mine[1:-1] if isinstance(e, ItemDelta)]
        assert len(deltas) == len(mine) - 2 and "".join(deltas) == item.text
        assert item.done and item.message is not None


def test_the_turn_layer_is_one_object_under_every_name() -> None:
    import harmonia.openai_compat as compat

    for name in ("OutputAssembler", "OutputItem", "OutputDiagnostic", "ItemAdded", "ItemDone"):
        assert getattr(compat, name) is getattr(harmonia, name)


def test_feed_after_finish_is_an_input_error(enc: HarmonyEncoding) -> None:
    asm, _ = run(enc, "<|channel|>final<|message|>x<|return|>")
    assert asm.finish() == []  # a second finish is harmless
    with pytest.raises(InputError, match="after finish"):
        asm.feed(1)


def test_the_summary_is_known_after_finish(enc: HarmonyEncoding) -> None:
    asm = OutputAssembler(enc)
    with pytest.raises(InputError, match="finish"):
        _ = asm.summary


def test_a_long_item_grows_in_place_not_by_a_copy_per_token(enc: HarmonyEncoding) -> None:
    # A copy of the item's whole text per token made a long reasoning quadratic. Counted
    # in memory, not time: grown in place, the traced peak is about one text (its
    # block, moved by realloc); a copy holds the old and the new text at once, two.
    import tracemalloc

    asm = OutputAssembler(enc)
    for token in enc.encode("<|channel|>analysis<|message|>", allowed_special="all"):
        asm.feed(token)
    word = enc.encode(" word")[0]
    for _ in range(40_000):
        asm.feed(word)
    item = asm.items[-1]
    size = len(item.text)
    tracemalloc.start()
    try:
        for _ in range(200):
            asm.feed(word)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(item.text) == size + 200 * len(" word")
    assert item.text.endswith(" word word")
    assert peak < 1.5 * size
