"""Token provenance (``render_with_spans``): every token has exactly one owner.

Checked on the guide's examples, on random conversations and on the reference
corpus: the spans tile the ids, each part decodes to what it should, the ids are
those of the plain render of the same mode, and a strict parse of the tokens finds
the same message boundaries.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from harmonia import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    InputError,
    Message,
    MessageSpans,
    RenderConversationConfig,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
)

ROOT = Path(__file__).resolve().parents[2]
# The reference corpus, in ``../shared/golden`` beside the checkout (as in CI).
CORPUS = ROOT.parent / "shared" / "golden" / "reference-corpus.jsonl.gz"
RenderModeName = Literal["conversation", "completion", "training"]
TERMINATORS = {"<|end|>", "<|call|>", "<|return|>"}
MODES: tuple[RenderModeName, ...] = ("conversation", "completion", "training")


def weather_conversation() -> Conversation:
    tool = ToolDescription.new(
        "get_current_weather",
        "Gets the current weather in the provided location.",
        parameters={
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    )
    dev = DeveloperContent.new().with_instructions("Be brief.").with_function_tools([tool])
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(Role.DEVELOPER, dev),
            Message.from_role_and_content(Role.USER, "What is the weather in Tokyo?"),
            Message.from_role_and_content(Role.ASSISTANT, "Need the tool.").with_channel(
                "analysis"
            ),
            Message.from_role_and_content(Role.ASSISTANT, '{"location":"Tokyo"}')
            .with_channel("commentary")
            .with_recipient("functions.get_current_weather")
            .with_content_type("<|constrain|>json"),
            Message.from_author_and_content(
                Author.new(Role.TOOL, "functions.get_current_weather"), '{"sunny": true}'
            )
            .with_channel("commentary")
            .with_recipient("assistant"),
            Message.from_role_and_content(Role.ASSISTANT, "Sunny.").with_channel("analysis"),
            Message.from_role_and_content(Role.ASSISTANT, "It is sunny.").with_channel("final"),
        ]
    )


WORDS = ["hi", " there", "Tokyo", "{}", "é", "東京", "\n", "<|end|>", "to=x", " "]


def random_conversation(rng: random.Random) -> Conversation:
    messages = [Message.from_role_and_content(Role.SYSTEM, SystemContent.new())]
    for _ in range(rng.randint(1, 8)):
        text = "".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
        kind = rng.randrange(6)
        if kind == 0:
            m = Message.from_role_and_content(Role.USER, text)
            if rng.random() < 0.3:
                m = Message.from_author_and_content(Author.new(Role.USER, "alice"), text)
        elif kind == 1:
            m = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(
                rng.choice(["analysis", "final", "commentary"])
            )
        elif kind == 2:
            m = (
                Message.from_role_and_content(Role.ASSISTANT, text)
                .with_channel("commentary")
                .with_recipient(rng.choice(["functions.get_x", "browser.search", "python"]))
                .with_content_type(rng.choice(["json", "<|constrain|>json", "code"]))
            )
        elif kind == 3:
            m = Message.from_author_and_content(Author.new(Role.TOOL, "functions.get_x"), text)
            m = m.with_channel("commentary").with_recipient("assistant")
        elif kind == 4:
            m = Message.from_role_and_content(Role.ASSISTANT, text)
        else:
            m = Message.from_role_and_content(Role.DEVELOPER, text)
        messages.append(m)
    return Conversation.from_messages(messages)


def corpus_conversations(limit: int) -> Iterator[Conversation]:
    if not CORPUS.exists():
        return
    found = 0
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        for line in lines:
            case = json.loads(line)
            if case["kind"] != "render" or case["expected"].get("conversation") == "error":
                continue
            yield Conversation.from_json(json.dumps(case["conversation"]))
            found += 1
            if found == limit:
                return


def text(enc: HarmonyEncoding, ids: list[int]) -> str:
    return enc.decode(ids)


def expected_parts(message: Message) -> dict[str, str]:
    role = message.author.role
    if role is Role.TOOL:
        role_text = message.author.name or ""
    else:
        role_text = role.value + ("" if message.author.name is None else ":" + message.author.name)
    recipient = message.recipient
    ct = message.content_type
    return {
        "start": "<|start|>",
        "role": role_text,
        "recipient": "" if recipient in (None, "all") else " to=" + str(recipient),
        "channel": "" if message.channel is None else "<|channel|>" + message.channel,
        "content_type": "" if ct is None else " " + ct,
        "message": "<|message|>",
    }


def check(enc: HarmonyEncoding, conversation: Conversation) -> None:
    for mode in MODES:
        config = RenderConversationConfig(auto_drop_analysis=bool(len(mode) % 2))
        rendered = enc.render_with_spans(conversation, config, mode=mode)
        ids = rendered.ids
        plain = {
            "conversation": enc.render_conversation(conversation, config),
            "completion": enc.render_conversation_for_completion(
                conversation, Role.ASSISTANT, config
            ),
            "training": enc.render_conversation_for_training(conversation, config),
        }[mode]
        assert ids == plain
        # Tiling: the parts of the spans cover every token exactly once, in order.
        position = 0
        for span in rendered.spans:
            for _, begin, end in span.parts():
                assert begin == position and end >= begin
                position = end
        assert position == len(ids)
        # The compact records and the spans built from them say the same, both ways.
        spans = tuple(rendered.spans)
        assert len(rendered.spans.records) == len(spans)
        assert MessageSpans.of(spans).records == list(rendered.spans.records)
        assert rendered.spans == spans and MessageSpans(rendered.spans.records) == spans
        assert hash(rendered.spans) == hash(spans)
        assert rendered.spans[1:] == spans[1:]
        kept: list[int | None] = [
            i for i in range(len(conversation.messages)) if i not in rendered.dropped
        ]
        if mode == "completion":
            kept.append(None)
        assert [s.message_index for s in rendered.spans] == kept
        for span in rendered.spans:
            got: dict[str, str] = {name: text(enc, ids[a:b]) for name, a, b in span.parts()}
            if span.message_index is None:
                assert got == {"start": "<|start|>", "role": "assistant"}
                continue
            message = conversation.messages[span.message_index]
            for name, want in expected_parts(message).items():
                assert got[name] == want, (name, got)
            assert got["terminator"] in TERMINATORS
            if all(isinstance(c, TextContent) for c in message.content):
                assert got["body"] == "".join(c.text for c in message.content)  # type: ignore[attr-defined]
            assert rendered.span_at(span.start) == span
            assert rendered.span_at(span.stop - 1) == span
        # A strict parse of the same tokens finds the same message boundaries
        # (lenient where an empty channel is rendered: the one field that renders
        # as the reference does but does not read back strictly).
        strict = all(m.channel != "" for m in conversation.messages)
        if mode != "completion":
            parsed = enc.parse_messages_from_completion_tokens(ids, None, strict=strict)
            assert len(parsed) == len(rendered.spans)
            for span, message in zip(rendered.spans, parsed, strict=True):
                one = enc.parse_messages_from_completion_tokens(
                    ids[span.start : span.stop], None, strict=strict
                )
                assert [m.to_dict() for m in one] == [message.to_dict()]


def test_spans_of_the_weather_conversation(enc: HarmonyEncoding) -> None:
    check(enc, weather_conversation())
    rendered = enc.render_with_spans(weather_conversation(), mode="training")
    call = next(s for s in rendered.spans if s.message_index == 4)
    assert text(enc, rendered.ids[slice(*call.part("recipient"))]) == (
        " to=functions.get_current_weather"
    )
    assert text(enc, rendered.ids[slice(*call.part("content_type"))]) == " <|constrain|>json"
    assert text(enc, rendered.ids[slice(*call.part("terminator"))]) == "<|call|>"
    assert text(enc, rendered.ids[slice(*rendered.spans[-1].part("terminator"))]) == "<|return|>"
    # The reference's rule drops the analysis before the first final.
    assert rendered.dropped == frozenset({3, 6})


def test_spans_of_random_conversations(enc: HarmonyEncoding) -> None:
    rng = random.Random(7)
    for _ in range(150):
        check(enc, random_conversation(rng))


@pytest.mark.skipif(
    not CORPUS.exists(), reason="the shared reference corpus is not on this machine"
)
def test_spans_of_the_reference_corpus(enc: HarmonyEncoding) -> None:
    for conversation in corpus_conversations(120):
        check(enc, conversation)


def test_completion_span_of_the_next_role(enc: HarmonyEncoding) -> None:
    conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
    rendered = enc.render_with_spans(conv, mode="completion", next_turn_role=Role.USER)
    last = rendered.spans[-1]
    assert last.message_index is None
    assert text(enc, rendered.ids[last.start : last.stop]) == "<|start|>user"


def test_unknown_mode_and_position_are_input_errors(enc: HarmonyEncoding) -> None:
    conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
    with pytest.raises(InputError, match="render mode"):
        enc.render_with_spans(conv, mode="prompt")  # type: ignore[arg-type]
    rendered = enc.render_with_spans(conv)
    with pytest.raises(InputError, match="outside"):
        rendered.span_at(len(rendered.ids))
