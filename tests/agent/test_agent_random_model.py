"""The loop over a random-weight gpt-oss under the harmony mask: it never breaks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harmonia import (
    Conversation,
    HarmonyEncoding,
    RenderConversationConfig,
    Role,
    ToolDescription,
    ToolNamespaceConfig,
)
from harmonia.agent import Agent, AgentLimits, StopReason, new_conversation
from harmonia.engines import SamplingParams
from harmonia.tools import Toolbox, is_tool_call
from harmonia.tools.browser import BrowserTool, LocalCorpusBackend
from random_model_steering import LikesSpecialTokens

pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")

RUNS = 20
KEEP_ALL = RenderConversationConfig(cot_policy="keep_all")


def test_random_sampling_under_the_mask_never_breaks_the_loop(
    random_gptoss: Any,
    enc: HarmonyEncoding,
    corpus: Path,
    fake_python: Any,
    spy: Any,
) -> None:
    from harmonia.engines.transformers import TransformersEngine

    browser = spy(BrowserTool(LocalCorpusBackend(corpus)))
    python = spy(fake_python())
    box = Toolbox([browser, python])
    # A function the caller answers: a call to it ends the run with TOOL_CALLS.
    box.declare(
        ToolNamespaceConfig(
            "functions",
            None,
            [
                ToolDescription.new(
                    "get_weather",
                    "Gets the weather.",
                    {"type": "object", "properties": {"city": {"type": "string"}}},
                )
            ],
        )
    )
    engine = TransformersEngine(LikesSpecialTokens(random_gptoss, boost=10.0))
    chat = new_conversation("What is the tide doing?", toolbox=box, reasoning_effort="low")

    async def main() -> list[Any]:
        results = []
        for seed in range(RUNS):
            agent = Agent(
                engine,
                box,
                params=SamplingParams(max_tokens=48, seed=seed),
                limits=AgentLimits(max_steps=4, max_tokens=96),
                constraint=True,
            )
            results.append(await agent.run(chat).result())
        await engine.aclose()
        await box.aclose()
        return results

    results = asyncio.run(main())
    allowed = {
        StopReason.FINAL,
        StopReason.TOOL_CALLS,
        StopReason.LENGTH,
        StopReason.MAX_TOKENS,
        StopReason.MAX_STEPS,
    }
    builtin_calls = {"browser": 0, "python": 0}
    for result in results:
        assert result.stop_reason in allowed, (result.stop_reason, result.error)
        assert result.error is None
        for message in result.messages:
            if is_tool_call(message):
                namespace = box.parse_call(message).namespace
                if namespace in builtin_calls:
                    builtin_calls[namespace] += 1
        if result.stop_reason is StopReason.TOOL_CALLS:
            assert result.tool_calls[0].recipient == "functions.get_weather"
        # Whatever happened, the history renders and parses back to the same messages.
        rendered = enc.render_conversation(result.conversation, KEEP_ALL)
        parsed = enc.parse_messages_from_completion_tokens(rendered, None)
        new = parsed[len(chat.messages) :]
        assert [m.to_dict() for m in new] == [m.to_dict() for m in result.messages]
        assert enc.render_conversation(Conversation.from_messages(parsed), KEEP_ALL) == rendered
    # Every built-in call the model made reached its runtime.
    assert builtin_calls == {"browser": len(browser.calls), "python": len(python.calls)}
    reasons = {r.stop_reason for r in results}
    assert reasons & {StopReason.FINAL, StopReason.TOOL_CALLS}, "some runs must end by themselves"
    assert sum(builtin_calls.values()) > 0, "with tools declared, some runs must call one"
    assert all(r.messages[-1].author.role is not Role.SYSTEM for r in results if r.messages)
