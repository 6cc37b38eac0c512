"""``render --mode training`` and ``harmonia data build`` train the same sequence.

For one conversation, the guide policy's training render and the training
pipeline's ``guide`` rule (its default preset) give the same ids: the last
turn's reasoning is kept (it is what the sample teaches), the reasoning that
earlier final answers concluded is left out.
"""

from __future__ import annotations

import pytest

from harmonia import (
    Author,
    Conversation,
    HarmonyEncoding,
    Message,
    RenderConversationConfig,
    Role,
)
from harmonia.training import render_for_training


def _m(role: Role, text: str, channel: str | None = None, recipient: str | None = None) -> Message:
    message = Message.from_role_and_content(role, text)
    if channel is not None:
        message = message.with_channel(channel)
    if recipient is not None:
        message = message.with_recipient(recipient)
    return message


A, U, T = Role.ASSISTANT, Role.USER, Role.TOOL
#: The turn both longer conversations start with: it thinks, then answers.
FIRST_TURN = [_m(U, "Q1"), _m(A, "think1", "analysis"), _m(A, "A1", "final")]
CONVERSATIONS = {
    "two turns": [
        *FIRST_TURN,
        _m(U, "Q2"),
        _m(A, "think2", "analysis"),
        _m(A, "A2", "final"),
    ],
    "a tool call in the last turn": [
        *FIRST_TURN,
        _m(U, "Q2"),
        _m(A, "look it up", "analysis"),
        _m(A, "{}", "commentary", "functions.f"),
        Message.from_author_and_content(Author.new(T, "functions.f"), "42").with_channel(
            "commentary"
        ),
        _m(A, "found it", "analysis"),
        _m(A, "42", "final"),
    ],
    "one turn": [_m(U, "Q"), _m(A, "think", "analysis"), _m(A, "A", "final")],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_the_guide_training_render_is_the_data_sample(enc: HarmonyEncoding, name: str) -> None:
    messages = CONVERSATIONS[name]
    rendered = enc.render_conversation_for_training(
        Conversation.from_messages(messages), RenderConversationConfig(cot_policy="guide")
    )
    [sample] = render_for_training(messages, enc, "harmony")
    assert rendered == sample.input_ids
    text = enc.decode_utf8(rendered)
    assert messages[-2].content[0].text in text  # type: ignore[union-attr]
    if name != "one turn":
        assert "think1" not in text
