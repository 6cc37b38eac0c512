"""``classify``: the one reading of a header, and the disagreements it ended.

Before it, the stream (``_turn``), tool dispatch (``tools._route``) and the agent
loop each decided which header word is a tool, and split on real output: for
``<|channel|>commentary markdown<|message|>hello<|call|>`` a server streamed a
text item while its tool loop ran a tool named ``markdown``; for ``system``,
``text`` and ``json`` it was the other way round.
"""

from __future__ import annotations

import pytest

import harmonia
from harmonia import Message, ModelOutputError, OutputAssembler, RecoveryKind, Role
from harmonia.agent import AgentLoop, Finished, GenerationFinished, RunTool, Start, TokensSampled
from harmonia.engines import Finish, FinishReason
from harmonia.openai_compat import ResponseStream
from harmonia.tools import is_tool_call
from harmonia.vocabulary import CALL_ID

ENC = harmonia.load_harmony_encoding("HarmonyGptOss")

#: (channel, header word) -> what the stream shows and what runs: a call or not.
CASES = {
    ("commentary", "markdown"): False,
    ("commentary", "md"): False,
    ("analysis", "html"): False,
    ("commentary", "system"): False,
    ("analysis", "developer"): False,
    ("commentary", "text"): False,
    ("commentary", "json"): False,
    ("final", "json"): False,
    ("final", "get_time"): False,  # a bare word on the final channel is a content type
    ("commentary", "get_time"): True,  # ... and a call where calls are made
    ("analysis", "python"): True,
    ("final", "functions.f"): True,
    ("commentary", "all"): False,
}


def _agent_runs(tokens: list[int]) -> Message | None:
    """The call an agent loop runs for this output, or ``None``."""
    chat = harmonia.Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")])
    loop = AgentLoop(ENC, chat)
    loop.send(Start())
    step = loop.send(TokensSampled(tuple(tokens)))
    if not isinstance(step.action, Finished):
        step = loop.send(GenerationFinished(Finish(FinishReason.STOP, tokens[-1])))
    return step.action.call if isinstance(step.action, RunTool) else None


@pytest.mark.parametrize(("channel", "word"), sorted(CASES))
def test_stream_dispatch_and_agent_read_a_header_alike(channel: str, word: str) -> None:
    tokens = ENC.encode(
        f"<|channel|>{channel} {word}<|message|>hello<|call|>", allowed_special="all"
    )
    assert tokens[-1] == CALL_ID
    calls = CASES[(channel, word)]
    stream = ResponseStream(ENC, model="m", ids="seed", created_at=0, builtin_calls="native")
    stream.feed_many(tokens)
    stream.finish()
    [item] = stream.response["output"]
    assert (item["type"] not in ("message", "reasoning")) is calls
    message = ENC.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT)[-1]
    assert is_tool_call(message) is calls
    ran = _agent_runs(tokens)
    assert (ran is not None) is calls
    if ran is not None:
        assert item.get("name", item["type"]) in (word, "code_interpreter_call", "f")


def test_the_markdown_example_is_text_and_runs_nothing() -> None:
    tokens = ENC.encode(
        "<|channel|>commentary markdown<|message|>hello<|call|>", allowed_special="all"
    )
    asm = OutputAssembler(ENC)
    for token in tokens:
        asm.feed(token)
    asm.finish()
    [item] = asm.items
    assert (item.kind, item.phase, item.content_type) == ("text", "commentary", "markdown")
    assert _agent_runs(tokens) is None


def test_classify_reads_fields_and_notes_repairs() -> None:
    from harmonia._turn import classify, is_content_type_word

    call = classify(Role.ASSISTANT, "commentary", "to=functions.f <|constrain|>json")
    assert (call.kind, call.recipient) == ("call", "functions.f")
    foreign = classify(Role.TOOL, "commentary", "assistant")
    assert foreign.kind == "reasoning" and foreign.notes[0][0] is RecoveryKind.FOREIGN_AUTHOR
    odd = classify(Role.ASSISTANT, "final<|channel|>x", "functions.f<|end|>")
    assert (odd.kind, odd.channel, odd.recipient) == ("text", None, None)
    assert [kind for kind, _ in odd.notes] == [RecoveryKind.HEADER_TEXT] * 2
    with pytest.raises(ModelOutputError, match="special-token text"):
        classify(Role.ASSISTANT, "final", "functions.f<|end|>", strict=True)
    assert classify(Role.ASSISTANT, "weird", None).notes[0][0] is RecoveryKind.UNKNOWN_CHANNEL
    assert classify(Role.ASSISTANT, "commentary", "").kind == "text"  # `to=` and nothing
    assert is_content_type_word("yaml", "commentary") and not is_content_type_word("f", "analysis")
