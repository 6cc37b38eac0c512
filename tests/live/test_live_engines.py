"""harmonia's engines against real llama-server and vLLM processes serving a tiny gpt-oss.

The model has random weights (tools/live/build_model.py) with a fixed liking for the
ids that end messages, so constrained turns end within tens of tokens. What is checked
is what harmonia promises whatever the model writes: ids in and out, stop ids, limits,
cancellation, and that every constrained turn parses strictly and ends right.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal

import pytest
from live_support import SERVED_NAME, LiveServer, get_json, post_json

from harmonia import (
    Conversation,
    DeveloperContent,
    HarmonyEncodingName,
    Message,
    Role,
    SystemContent,
    ToolDescription,
    load_harmony_encoding,
)
from harmonia.constrained import GrammarOptions
from harmonia.engines import Completion, Constraint, FinishReason, SamplingParams

ENC = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["Oslo", "Lima"]}, "celsius": {"type": "boolean"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"unit": {"enum": ["c", "f"]}, "ok": {"type": "boolean"}},
    "required": ["unit", "ok"],
    "additionalProperties": False,
}
#: Seeds per check: few, since a loaded 2-core machine runs the tiny model at a few tokens/s
#: under a grammar (HARMONIA_LIVE_SEEDS raises it).
SEEDS = range(int(os.environ.get("HARMONIA_LIVE_SEEDS") or 2))
TURN_TOKENS = 200


def conversation(*, tools: bool = False, answer_format: bool = False) -> Conversation:
    developer = DeveloperContent.new().with_instructions("Answer briefly.")
    if tools:
        weather = ToolDescription.new("get_weather", "Gets the weather.", WEATHER_SCHEMA)
        developer = developer.with_function_tools([weather])
    if answer_format:
        developer = developer.with_response_format("answer", ANSWER_SCHEMA)
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(Role.DEVELOPER, developer),
            Message.from_role_and_content(Role.USER, "Weather in Oslo?"),
        ]
    )


def prompt(conv: Conversation) -> list[int]:
    return list(ENC.render_conversation_for_completion(conv, Role.ASSISTANT))


def complete(
    make_engine: Callable[[], Any],
    conv: Conversation,
    params: SamplingParams,
    constraint: Constraint | None = None,
) -> Completion:
    async def main() -> Completion:
        engine = make_engine()
        try:
            return await engine.generate(prompt(conv), params, constraint=constraint).result()
        finally:
            await engine.aclose()

    result: Completion = asyncio.run(main())
    return result


def test_plain_generation_and_max_tokens(make_engine: Any) -> None:
    lengths = []
    for seed in SEEDS:
        params = SamplingParams(max_tokens=6, seed=seed)
        completion = complete(make_engine, conversation(), params)
        assert 1 <= len(completion.tokens) <= 6
        assert completion.usage.completion_tokens == len(completion.tokens)
        if completion.finish.reason is FinishReason.LENGTH:
            assert len(completion.tokens) == 6
        else:
            assert completion.finish.reason is FinishReason.STOP
            assert completion.tokens[-1] == completion.finish.stop_token
        lengths.append(len(completion.tokens))
    assert 6 in lengths  # the limit itself was reached, not only early stops


def test_ids_match_the_servers_own_tokenizer(live: LiveServer) -> None:
    conv = conversation(tools=True)
    conv.messages.append(Message.from_role_and_content(Role.USER, "Tabs\tand ünïcödé 你好 🦜"))
    ids = prompt(conv)
    text = ENC.decode(ids)
    if live.name == "llama.cpp":
        body = {"content": text, "add_special": False, "parse_special": True}
        got = post_json(live.url + "/tokenize", body)["tokens"]
    else:
        body = {"model": SERVED_NAME, "prompt": text, "add_special_tokens": False}
        got = post_json(live.url + "/tokenize", body)["tokens"]
    assert got == ids


def _busy(live: LiveServer) -> bool:
    if live.name == "llama.cpp":
        return any(slot.get("is_processing") for slot in get_json(live.url + "/slots"))
    with __import__("urllib.request").request.urlopen(live.url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vllm:num_requests_running"):
                return float(line.rsplit(" ", 1)[1]) > 0
    return False


def test_cancel_stops_the_server(make_engine: Any, live: LiveServer) -> None:
    async def main() -> None:
        engine = make_engine()
        # No stop ids and a high limit: only the cancel can end it soon.
        params = SamplingParams(max_tokens=4000, seed=1, stop_token_ids=())
        generation = engine.generate(prompt(conversation()), params)
        seen = 0
        async for ids in generation:
            seen += len(ids)
            if seen >= 3:
                break
        await generation.cancel()
        assert generation.finish is not None
        if generation.finish.reason is not FinishReason.STOP:  # an end id may come first
            assert generation.finish.reason is FinishReason.CANCELLED
        await engine.aclose()

    asyncio.run(main())
    deadline = time.monotonic() + 30  # bounded: the server notices the closed stream
    while _busy(live):
        assert time.monotonic() < deadline, f"{live.name} kept generating after the cancel"
        time.sleep(0.2)


CASES = {
    "tool_required": (dict(tools=True), GrammarOptions(tool_choice="required")),
    "tool_auto": (dict(tools=True), GrammarOptions()),
    "json_schema": (dict(answer_format=True), GrammarOptions(tool_choice="none")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_constrained_turns_parse_strictly_and_end_with_the_right_id(
    make_engine: Any, case: str
) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    kwargs, options = CASES[case]
    conv = conversation(**kwargs)  # type: ignore[arg-type]
    constraint = Constraint.from_conversation(conv, options)
    finished = 0
    for seed in SEEDS:
        params = SamplingParams(max_tokens=TURN_TOKENS, seed=seed)
        completion = complete(make_engine, conv, params, constraint)
        if completion.finish.reason is FinishReason.LENGTH:
            continue  # a random model may ramble in analysis; what it wrote is checked below
        assert completion.finish.reason is FinishReason.STOP
        finished += 1
        messages = ENC.parse_messages_from_completion_tokens(
            completion.tokens, Role.ASSISTANT, strict=True
        )
        last = messages[-1]
        if last.recipient is not None:
            assert completion.finish.stop_token == 200012  # <|call|>
            assert last.recipient == "functions.get_weather"
            jsonschema.validate(json.loads(last.content[0].text), WEATHER_SCHEMA)
        else:
            assert case != "tool_required"
            assert completion.finish.stop_token == 200002  # <|return|>
            assert last.channel == "final"
            if case == "json_schema":
                jsonschema.validate(json.loads(last.content[0].text), ANSWER_SCHEMA)
        specials = {t for t in completion.tokens if t >= 199998}
        assert specials <= {200003, 200005, 200006, 200007, 200008, 200002, 200012}
    assert finished >= 1, f"none of {len(SEEDS)} turns ended"


def test_agent_loop_calls_the_function_tool_under_tool_choice_required(make_engine: Any) -> None:
    from harmonia.agent import Agent, AgentLimits, StopReason, new_conversation
    from harmonia.tools import FunctionTools, Toolbox, function_tool

    calls: list[tuple[str, bool]] = []

    @function_tool
    def get_weather(city: Literal["Oslo", "Lima"], celsius: bool) -> str:
        """Gets the weather.

        Args:
            city: The city.
            celsius: Whether to answer in Celsius.
        """
        calls.append((city, celsius))
        return f"{city}: 14"

    box = Toolbox([FunctionTools([get_weather])])

    def constraint(conv: Conversation) -> Constraint:
        # The first step must call the tool; once its reply is in, the model may answer.
        answered = any(m.author.role is Role.TOOL for m in conv.messages)
        choice = "auto" if answered else "required"
        return Constraint.from_conversation(conv, GrammarOptions(tool_choice=choice))

    async def main() -> Any:
        engine = make_engine()
        try:
            agent = Agent(
                engine,
                box,
                params=SamplingParams(max_tokens=TURN_TOKENS, seed=3),
                limits=AgentLimits(max_steps=3, max_tokens=3 * TURN_TOKENS),
                constraint=constraint,
            )
            return await agent.run(new_conversation("Weather in Oslo?", toolbox=box)).result()
        finally:
            await engine.aclose()

    result = asyncio.run(main())
    assert calls, f"the tool was never called: {result.stop_reason} {result.error}"
    assert calls[0][0] in ("Oslo", "Lima") and isinstance(calls[0][1], bool)
    first_call = next(m for m in result.messages if m.recipient == "functions.get_weather")
    assert json.loads(first_call.content[0].text)["city"] == calls[0][0]
    assert result.stop_reason in (
        StopReason.FINAL,
        StopReason.MAX_STEPS,
        StopReason.MAX_TOKENS,
        StopReason.LENGTH,
    )
    assert result.error is None


def test_logprobs_come_back_aligned_with_the_ids(make_engine: Any) -> None:
    # Greedy: the sampled id is the model's favourite, which the raw distribution
    # (before sampling, what the engines report) must rank first.
    params = SamplingParams(max_tokens=8, temperature=0, top_logprobs=3, stop_token_ids=())
    completion = complete(make_engine, conversation(), params)
    assert completion.logprobs is not None
    assert [lp.token for lp in completion.logprobs] == list(completion.tokens)
    for lp in completion.logprobs:
        values = [value for _, value in lp.top]
        assert len(values) == 3 and values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-4
        assert lp.top[0][0] == lp.token
        assert lp.logprob == pytest.approx(lp.top[0][1], abs=1e-4)
