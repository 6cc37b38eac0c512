"""Training samples keep, mask and call exactly what inference renders and reads.

One chain-of-thought table (``harmonia._render.cot``) and one call rule
(``harmonia._turn.classify``) serve the renderer, the agent, the server and the
training samples. Over random conversations (odd recipients included: ``to=user``,
a content-type word, a bare function name on various channels), this checks:

* under every CoT policy, a sample renders exactly the messages the renderer's
  training render keeps;
* under the default (faithful) policy, every trained message follows the very
  prompt inference renders for it (``render_conversation_for_completion`` of the
  messages before it, under the agent's and the server's ``guide`` policy);
* a message is trained as a call exactly when ``classify`` -- the reader of the
  stream, ``is_tool_call`` and ``Toolbox.parse_call`` -- reads the rendered
  header back as a call.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harmonia import (
    Author,
    Conversation,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
    load_harmony_encoding,
)
from harmonia._turn import classify, is_call
from harmonia.training import PRESETS, TrainPolicy, render_for_training
from harmonia.vocabulary import COT_POLICY_NAMES, DEFAULT_COT_POLICY

ENC: HarmonyEncoding = load_harmony_encoding("HarmonyGptOss")
CALL_OFF = "context: tool calls are not trained by the policy"

# (channel, recipient, content type) of the assistant messages a turn draws from.
HEADERS = [
    ("analysis", None, None),
    ("commentary", None, None),  # a preamble
    ("commentary", "functions.get_weather", "<|constrain|>json"),
    ("analysis", "python", "code"),
    ("commentary", "get_weather", "json"),  # a bare name on a call channel: a call
    ("final", "get_weather", None),  # a bare word outside the call channels: a content type
    ("commentary", "user", None),  # addresses a person: text
    ("commentary", "markdown", None),  # a content-type word: text
    ("analysis", "json", None),
    ("final", "all", None),
]


def _assistant(k: int, n: int) -> Message:
    channel, recipient, content_type = HEADERS[k]
    message = Message.from_role_and_content(Role.ASSISTANT, f"{channel} {n}")
    message = message.with_channel(channel)
    if recipient is not None:
        message = message.with_recipient(recipient)
    if content_type is not None:
        message = message.with_content_type(content_type)
    return message


def _result(call: Message, n: int) -> Message:
    name = call.recipient if "." in (call.recipient or "") else f"functions.{call.recipient}"
    if call.recipient == "python":
        name = "python"
    author = Author.new(Role.TOOL, name)
    return (
        Message.from_author_and_content(author, f"result {n}")
        .with_channel(call.channel or "commentary")
        .with_recipient("assistant")
    )


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages = [Message.from_role_and_content(Role.USER, "Q0")]
    n = 0
    for t in range(draw(st.integers(1, 3))):
        if t:
            messages.append(Message.from_role_and_content(Role.USER, f"Q{t}"))
        for k in draw(st.lists(st.integers(0, len(HEADERS) - 1), max_size=4)):
            n += 1
            message = _assistant(k, n)
            messages.append(message)
            if is_call(message):
                messages.append(_result(message, n))
        if draw(st.booleans()):
            n += 1
            messages.append(
                Message.from_role_and_content(Role.ASSISTANT, f"A{n}").with_channel("final")
            )
    return messages


def _rendered(sample_spans: object) -> list[int]:
    return [record[0] for record in sample_spans.records]  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_samples_keep_what_the_renderer_keeps(messages: list[Message]) -> None:
    conversation = Conversation(messages)
    for policy in COT_POLICY_NAMES:
        kept = ENC.render_conversation_for_training(
            conversation, RenderConversationConfig(cot_policy=policy)
        )
        for sample in render_for_training(
            messages, ENC, TrainPolicy(cot=policy, turns="all", full_sequence=True)
        ):
            # The reference rule keeps the messages after a last final; the others
            # leave that trailing context out, so compare the common prefix.
            ids = sample.input_ids
            assert ids[:-1] == kept[: len(ids) - 1], policy


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_every_trained_message_follows_the_inference_prompt(messages: list[Message]) -> None:
    config = RenderConversationConfig(cot_policy=DEFAULT_COT_POLICY)
    for sample in render_for_training(messages, ENC, PRESETS["harmony"]):
        checked = 0
        for index, start, offsets, _ in sample.spans.records:
            assert index is not None
            # The harness renders a prompt at the start of a turn (after its input or
            # a final answer) and after a tool result; in between the model goes on
            # after its own tokens.
            before = messages[index - 1]
            rendered_here = before.author.role is not Role.ASSISTANT or before.channel == "final"
            if sample.reasons[index] != "trained" or not rendered_here:
                continue
            checked += 1
            prompt = ENC.render_conversation_for_completion(
                Conversation(messages[:index]), Role.ASSISTANT, config
            )
            # The prompt ends with the <|start|>assistant that opens the message.
            assert sample.input_ids[: start + offsets[0]] == prompt, index
        assert checked or "trained" not in sample.reasons


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_calls_are_what_classify_reads_back(messages: list[Message]) -> None:
    no_calls = TrainPolicy(tool_calls=False, turns="all")
    calls = TrainPolicy(turns="all")
    [without] = render_for_training(messages, ENC, no_calls)
    [with_calls] = render_for_training(messages, ENC, calls)
    parsed = ENC.parse_messages_from_completion_tokens(with_calls.input_ids, None, strict=True)
    rendered = _rendered(with_calls.spans)
    assert len(parsed) == len(rendered)
    for index, back in zip(rendered, parsed, strict=True):
        message = messages[index]
        if message.author.role is not Role.ASSISTANT:
            continue
        read = classify(back.author.role, back.channel, back.recipient, back.content_type)
        assert (read.kind == "call") == is_call(message), (message.channel, message.recipient)
        assert (without.reasons[index] == CALL_OFF) == (read.kind == "call")
        assert with_calls.reasons[index] != CALL_OFF
