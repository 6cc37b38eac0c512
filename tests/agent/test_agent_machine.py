"""The sans-IO state machine on its own: inputs in, events and actions out, no engine."""

from __future__ import annotations

from typing import Any

import pytest

from harmonia import Author, HarmonyEncoding, InputError, Message, Role
from harmonia.agent import (
    AgentLimits,
    AgentLoop,
    Cancel,
    Done,
    Finished,
    GenerationFinished,
    RunTool,
    Sample,
    Start,
    State,
    StopReason,
    TokensSampled,
    ToolResult,
    new_conversation,
)
from harmonia.engines import Constraint, Finish, FinishReason, SamplingParams

CALL = 200012


def test_a_tool_round_trip_step_by_step(enc: HarmonyEncoding, turns: Any) -> None:
    loop = AgentLoop(enc, new_conversation("2+2?"), params=SamplingParams(max_tokens=100))
    assert loop.state is State.IDLE
    first = loop.send(Start()).action
    assert isinstance(first, Sample) and first.params.max_tokens == 100
    assert first.constraint is None

    call = turns("<|channel|>analysis to=python code<|message|>2+2<|call|>")
    step = loop.send(TokensSampled(call))
    assert step.action is None and loop.state is State.SAMPLING
    step = loop.send(GenerationFinished(Finish(FinishReason.STOP, CALL)))
    assert isinstance(step.action, RunTool) and loop.state is State.TOOLS
    assert step.action.call.recipient == "python"

    # Tokens while a tool runs are the driver's bug.
    with pytest.raises(InputError, match="TokensSampled cannot be sent in state 'tools'"):
        loop.send(TokensSampled((1,)))

    reply = (
        Message.from_author_and_content(Author(Role.TOOL, "python"), "4")
        .with_recipient("assistant")
        .with_channel("analysis")
    )
    second = loop.send(ToolResult(reply)).action
    assert isinstance(second, Sample)
    assert enc.decode(list(second.prompt)).endswith(
        "<|start|>python to=assistant<|channel|>analysis<|message|>4<|end|><|start|>assistant"
    )

    step = loop.send(Cancel())
    assert isinstance(step.action, Finished) and isinstance(step.events[-1], Done)
    assert step.action.result.stop_reason is StopReason.CANCELLED
    assert loop.state is State.DONE and loop.result is step.action.result
    with pytest.raises(InputError, match="the run is over"):
        loop.send(Cancel())


def test_the_budget_lowers_each_steps_max_tokens(enc: HarmonyEncoding, turns: Any) -> None:
    loop = AgentLoop(
        enc,
        new_conversation("?"),
        params=SamplingParams(max_tokens=50),
        limits=AgentLimits(max_tokens=60),
    )
    loop.send(Start())
    call = turns("<|channel|>analysis to=python code<|message|>" + "1+" * 10 + "1<|call|>")
    loop.send(TokensSampled(call))
    tool = loop.send(GenerationFinished(Finish(FinishReason.STOP, CALL))).action
    assert isinstance(tool, RunTool)
    reply = Message.from_author_and_content(Author(Role.TOOL, "python"), "11")
    sample = loop.send(ToolResult(reply)).action
    assert isinstance(sample, Sample)
    assert sample.params.max_tokens == 60 - len(call)


def test_the_constraint_factory_sees_the_conversation_of_each_step(
    enc: HarmonyEncoding,
) -> None:
    seen: list[int] = []

    def factory(conversation: Any) -> Constraint:
        seen.append(len(conversation.messages))
        return Constraint(grammar="start: /x/")

    loop = AgentLoop(enc, new_conversation("hi", instructions="be brief"), constraint=factory)
    action = loop.send(Start()).action
    assert isinstance(action, Sample) and action.constraint == Constraint(grammar="start: /x/")
    assert seen == [3]


def test_the_callers_conversation_is_never_changed(enc: HarmonyEncoding, turns: Any) -> None:
    chat = new_conversation("hi")
    before = chat.to_dict()
    loop = AgentLoop(enc, chat)
    loop.send(Start())
    loop.send(TokensSampled(turns("<|channel|>final<|message|>yo<|return|>")))
    result = loop.send(GenerationFinished(Finish(FinishReason.STOP, 200002))).action
    assert isinstance(result, Finished) and result.result.answer == "yo"
    assert chat.to_dict() == before and len(result.result.conversation.messages) == 3


def test_an_unknown_cot_policy_is_refused_at_once(enc: HarmonyEncoding) -> None:
    with pytest.raises(InputError, match="unknown cot_policy 'forget'.*guide"):
        AgentLoop(enc, new_conversation("?"), cot_policy="forget")


@pytest.mark.parametrize("deltas", [True, False])
def test_without_deltas_the_loop_makes_no_text_events_and_the_same_run(
    enc: HarmonyEncoding, turns: Any, deltas: bool
) -> None:
    from harmonia.agent import FinalDelta, ReasoningDelta

    loop = AgentLoop(enc, new_conversation("hi"), deltas=deltas)
    loop.send(Start())
    tokens = turns(
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant"
        "<|channel|>final<|message|>Hello there<|return|>"
    )
    events = [event for token in tokens for event in loop.send(TokensSampled((token,))).events]
    step = loop.send(GenerationFinished(Finish(FinishReason.STOP, tokens[-1])))
    texts = [e for e in events if isinstance(e, (FinalDelta, ReasoningDelta))]
    assert bool(texts) is deltas
    if deltas:
        assert "".join(e.text for e in texts) == "thinkHello there"
    assert isinstance(step.action, Finished)
    assert [m.content[0].text for m in step.action.result.messages] == ["think", "Hello there"]
