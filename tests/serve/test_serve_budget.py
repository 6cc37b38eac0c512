"""A generation's token budget is computed once (``AgentLimits.budget``): the server's
request path and the agent loop agree on it, at the edges too.

The serve side runs for real (``Service.prepare`` and ``Service.admit`` over a
scripted engine, which records the ``max_tokens`` it was started with); the loop
side is ``AgentLoop``'s first ``Sample``. A spy on ``AgentLimits.budget`` shows
that both ask that one function, and that what the engine got is its answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from serve_support import DEFAULT_REPLY, ENC, harmony

from harmonia import Conversation, Message, Role
from harmonia.agent import AgentLimits, AgentLoop, Sample, Start, StopReason
from harmonia.engines import SamplingParams, ScriptedEngine
from harmonia.openai_compat import ChatCompletionStream
from harmonia.serve import ServerConfig
from harmonia.serve._errors import APIError
from harmonia.serve._service import Service

CHAT = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
PROMPT = ENC.render_conversation_for_completion(CHAT, Role.ASSISTANT)
P = len(PROMPT)


@pytest.fixture
def budget_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every ``AgentLimits.budget`` call: (prompt tokens, spent, the answer)."""
    calls: list[tuple[int, int, int]] = []
    real = AgentLimits.budget

    def spy(self: AgentLimits, prompt_tokens: int, spent: int = 0) -> int:
        answer = real(self, prompt_tokens, spent)
        calls.append((prompt_tokens, spent, answer))
        return answer

    monkeypatch.setattr(AgentLimits, "budget", spy)
    return calls


def served_max_tokens(context: int, asked: int | None) -> int:
    """The ``max_tokens`` the engine was started with for one chat turn on ``PROMPT``."""

    seen: list[SamplingParams] = []

    class Recording(ScriptedEngine):
        def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Any:
            seen.append(params)
            return super().generate(prompt, params, constraint=constraint)

    engine = Recording([harmony(DEFAULT_REPLY)])

    async def turn() -> None:
        service = Service(
            engine, ServerConfig(context_tokens=context, max_output_tokens=131_072, warmup=False)
        )
        await service.start()
        assert service.ready, service.not_ready_reason
        prepared = service.prepare(CHAT, None, strict=False)
        assert prepared.prompt == PROMPT
        params = service.sampling(asked, None, None)
        admitted = await service.admit(prepared, params, ChatCompletionStream(ENC, model="m"))
        async for _ in admitted.events():
            pass
        await admitted.close()
        await service.aclose()

    asyncio.run(turn())
    assert len(seen) == 1
    return seen[0].max_tokens


def looped_max_tokens(context: int, asked: int) -> int | StopReason:
    """The first step's ``max_tokens`` of an agent loop on ``PROMPT``, or how it ended."""
    loop = AgentLoop(
        ENC,
        CHAT,
        params=SamplingParams(max_tokens=asked),
        limits=AgentLimits(max_steps=1, max_tokens=asked, context_tokens=context),
    )
    action = loop.send(Start()).action
    if isinstance(action, Sample):
        return action.params.max_tokens
    assert loop.result is not None
    return loop.result.stop_reason


@pytest.mark.parametrize(
    ("context", "asked", "expected"),
    [
        (P + 1, 131_072, 1),  # the prompt one short of the context: one token left
        (P + 1, None, 1),  # no limit asked: the engine default (4,096), cut the same way
        (P + 50, 500, 50),  # more asked than the context leaves
        (P + 50, 50, 50),  # exactly what is left
        (P + 50, 7, 7),  # less: as asked
    ],
)
def test_serve_and_the_agent_loop_agree_on_the_budget(
    budget_calls: list[tuple[int, int, int]], context: int, asked: int | None, expected: int
) -> None:
    served = served_max_tokens(context, asked)
    # The serve path asked the one function (the turn's cut, then the loop's own step).
    assert budget_calls and all(call == (P, 0, expected) for call in budget_calls)
    assert len(budget_calls) == 2
    budget_calls.clear()
    looped = looped_max_tokens(context, asked or SamplingParams().max_tokens)
    assert budget_calls == [(P, 0, expected)]
    assert served == looped == expected


def test_a_prompt_exactly_at_the_context_is_refused_by_serve_and_ends_the_loop() -> None:
    # The loop: nothing fits, and max_tokens is not spent, so the window ended it.
    assert looped_max_tokens(P, 100) is StopReason.LENGTH
    assert AgentLimits(max_tokens=100, context_tokens=P).budget(P) == 0

    # The server refuses it before any engine starts, with the words it always had.
    async def prepare() -> None:
        service = Service(ScriptedEngine([]), ServerConfig(context_tokens=P, warmup=False))
        await service.start()
        try:
            service.prepare(CHAT, None, strict=False)
        finally:
            await service.aclose()

    with pytest.raises(APIError) as refused:
        asyncio.run(prepare())
    assert refused.value.status == 400 and refused.value.code == "context_length_exceeded"
    assert refused.value.message == (
        f"the prompt is {P} tokens, more than this server's limit of {P - 1}; shorten the input"
    )


def test_spent_max_tokens_stops_the_loop_before_the_context_does() -> None:
    # The run's max_tokens spent (MAX_TOKENS) is told apart from a full window (LENGTH).
    limits = AgentLimits(max_tokens=10, context_tokens=P + 100)
    assert limits.budget(P, spent=10) == 0
    assert limits.budget(P, spent=4) == 6
    assert AgentLimits(max_tokens=10, context_tokens=P + 3).budget(P, spent=4) == 3
