"""The agent loop over the scripted engine: tools, errors, limits, cancellation, history."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from harmonia import (
    Author,
    Conversation,
    EngineError,
    HarmonyEncoding,
    Message,
    ModelOutputError,
    RenderConversationConfig,
    Role,
    ToolDescription,
    ToolNamespaceConfig,
    write_tiktoken_file,
)
from harmonia.agent import (
    Agent,
    AgentLimits,
    Done,
    FinalDelta,
    MessageCompleted,
    PreambleDelta,
    ReasoningDelta,
    StopReason,
    ToolCallStarted,
    ToolResultReceived,
    new_conversation,
)
from harmonia.engines import SamplingParams, Script, ScriptedEngine
from harmonia.tools import FunctionTools, Toolbox, function_tool
from harmonia.tools.browser import BrowserTool, LocalCorpusBackend

KEEP_ALL = RenderConversationConfig(cot_policy="keep_all")
GUIDE = RenderConversationConfig(cot_policy="guide")
END, RETURN = 200007, 200002
START_ASSISTANT = (200006, 173781)  # <|start|>assistant


@function_tool
def get_weather(city: str) -> str:
    """Gets the weather.

    Args:
        city: The city.
    """
    return f"{city}: 14 C, light rain"


@function_tool
def book_ferry(day: str) -> str:
    """Books a ferry.

    Args:
        day: The day.
    """
    raise RuntimeError("no ferries on " + day)


STEP_SEARCH = (
    "<|channel|>analysis<|message|>Look it up in the corpus.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.search code<|message|>"
    '{"query": "high water every 12 hours"}<|call|>'
)
STEP_PYTHON = "<|channel|>analysis to=python code<|message|>7 * 24 * 60 / 745<|call|>"
STEP_FUNCTION = (
    "<|channel|>commentary<|message|>Checking the weather too.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Oslo"}<|call|>'
)
STEP_FINAL = (
    "<|channel|>analysis<|message|>About 13.5 high waters.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>About 13.5 high waters a week "
    "【0†L1】; Oslo has light rain.<|return|>"
)


def _toolbox(corpus: Path, python: Any) -> tuple[Toolbox, BrowserTool]:
    browser = BrowserTool(LocalCorpusBackend(corpus))
    return Toolbox([browser, python, FunctionTools([get_weather, book_ferry])]), browser


def _run(agent: Agent, conversation: Conversation) -> tuple[list[Any], Any]:
    async def main() -> tuple[list[Any], Any]:
        run = agent.run(conversation)
        events = [event async for event in run]
        result = await run.result()
        await agent.aclose()
        return events, result

    return asyncio.run(main())


def test_browser_python_function_then_final_answer(
    enc: HarmonyEncoding, turns: Any, corpus: Path, fake_python: Any
) -> None:
    python = fake_python()
    box, _ = _toolbox(corpus, python)
    scripts = [turns(s) for s in (STEP_SEARCH, STEP_PYTHON, STEP_FUNCTION, STEP_FINAL)]
    engine = ScriptedEngine(scripts)
    chat = new_conversation("How many high waters in a week?", toolbox=box)
    events, result = _run(Agent(engine, box), chat)

    assert result.stop_reason is StopReason.FINAL
    assert result.steps == 4
    assert result.answer == "About 13.5 high waters a week 【0†L1】; Oslo has light rain."
    # The UI saw each kind of event, in the order it happened.
    kinds = [type(e) for e in events if not isinstance(e, MessageCompleted)]
    squashed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] is not k]
    assert squashed == [
        ReasoningDelta,
        ToolCallStarted,
        ToolResultReceived,
        ToolCallStarted,
        ToolResultReceived,
        PreambleDelta,
        ToolCallStarted,
        ToolResultReceived,
        ReasoningDelta,
        FinalDelta,
        Done,
    ]
    assert "".join(e.text for e in events if isinstance(e, FinalDelta)) == result.answer
    replies = [e.reply for e in events if isinstance(e, ToolResultReceived)]
    # The tool outputs are the runtimes' own: the corpus search, the evaluation, the function.
    assert [r.author.name for r in replies] == ["browser.search", "python", "functions.get_weather"]
    assert "12 hours and 25 minutes" in replies[0].text and "Tides" in replies[0].text
    assert replies[1].text == f"{7 * 24 * 60 / 745}\n"
    assert replies[2].text == "Oslo: 14 C, light rain"
    assert [r.channel for r in replies] == ["analysis", "analysis", "commentary"]
    assert python.calls[0].arguments == "7 * 24 * 60 / 745"

    # Each prompt is the previous prompt, the messages the model wrote and the tool reply:
    # the current turn's analysis stays in the prompt through its tool calls.
    prompts = engine.prompts
    sampled = [m for m in result.messages if m.author.role is Role.ASSISTANT]
    per_step = [sampled[0:2], sampled[2:3], sampled[3:5]]
    for k in range(1, 4):
        written = [t for m in per_step[k - 1] for t in enc.render(m)]
        reply = enc.render(replies[k - 1])
        # The prompt ended in <|start|>assistant, which the first message re-renders.
        expected = (*prompts[k - 1][:-2], *written, *reply, *START_ASSISTANT)
        assert prompts[k] == expected
        assert "Look it up in the corpus." in enc.decode(list(prompts[k]))
    assert prompts[0] == tuple(enc.render_conversation_for_completion(chat, Role.ASSISTANT, GUIDE))
    assert result.usage.prompt_tokens == sum(len(p) for p in prompts)
    assert result.usage.completion_tokens == sum(len(s) for s in scripts)


def test_the_history_renders_byte_exact_and_parses_back(
    enc: HarmonyEncoding,
    turns: Any,
    corpus: Path,
    fake_python: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box, _ = _toolbox(corpus, fake_python())
    # gpt-oss writes `to=` after the channel; history (like the reference) writes it in the
    # role section. Scripted in that form, the history is exactly prompt + completion.
    canonical = [
        STEP_SEARCH.replace(
            "assistant<|channel|>analysis to=browser.search code",
            "assistant to=browser.search<|channel|>analysis code",
        ),
        STEP_PYTHON.replace(
            "<|channel|>analysis to=python code", " to=python<|channel|>analysis code"
        ),
        STEP_FUNCTION.replace(
            "assistant<|channel|>commentary to=functions.get_weather <|constrain|>json",
            "assistant to=functions.get_weather<|channel|>commentary <|constrain|>json",
        ),
        STEP_FINAL,
    ]
    scripts = [turns(s) for s in canonical]
    engine = ScriptedEngine(scripts)
    chat = new_conversation("How many high waters in a week?", toolbox=box)
    _, result = _run(Agent(engine, box), chat)
    conversation = result.conversation
    assert conversation.messages[: len(chat.messages)] == chat.messages

    # History keeps the whole turn; the sampled <|return|> is written <|end|>.
    rendered = enc.render_conversation(conversation, KEEP_ALL)
    assert scripts[-1][-1] == RETURN
    assert rendered == [*engine.prompts[-1], *scripts[-1][:-1], END]
    prompts = engine.prompts
    for k in range(1, 4):
        assert prompts[k][: len(prompts[k - 1]) + len(scripts[k - 1])] == (
            *prompts[k - 1],
            *scripts[k - 1],
        )
    # Parsed back, it is the same conversation.
    # Parsed back, the run's messages are the same; the system and developer messages come
    # back as their rendered text, which renders to the same tokens.
    parsed = enc.parse_messages_from_completion_tokens(rendered, None)
    n = len(chat.messages)
    assert len(parsed) == len(conversation.messages)
    assert [m.to_dict() for m in parsed[n:]] == [m.to_dict() for m in result.messages]
    assert enc.render_conversation(Conversation.from_messages(parsed), KEEP_ALL) == rendered
    assert Conversation.from_json(conversation.to_json()).to_dict() == conversation.to_dict()

    # Where the reference library is installed, it renders the same tokens.
    oh = pytest.importorskip("openai_harmony", reason="openai_harmony (the reference) is absent")
    # The reference would download its vocabulary; give it ours, offline.
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", os.path.dirname(write_tiktoken_file(tmp_path)))
    ref_enc = oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    ref_conv = oh.Conversation.from_json(conversation.to_json())
    for drop in (False, True):
        ref = ref_enc.render_conversation(
            ref_conv, oh.RenderConversationConfig(auto_drop_analysis=drop)
        )
        ours = enc.render_conversation(
            conversation, RenderConversationConfig(auto_drop_analysis=drop)
        )
        assert ours == ref


def test_the_next_turn_drops_the_finished_turns_analysis(enc: HarmonyEncoding, turns: Any) -> None:
    first = turns(
        "<|channel|>analysis<|message|>SECRET PLAN<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hi!<|return|>"
    )
    second = turns("<|channel|>final<|message|>Bye!<|return|>")
    engine = ScriptedEngine([first, second])
    agent = Agent(engine)
    result = agent.run_sync(new_conversation("Hello"))
    follow_up = Conversation.from_messages(
        [*result.conversation.messages, Message.from_role_and_content(Role.USER, "Bye")]
    )
    again = agent.run_sync(follow_up)
    assert again.answer == "Bye!"
    text = enc.decode(list(engine.prompts[1]))
    assert "SECRET PLAN" not in text
    assert "<|channel|>final<|message|>Hi!<|end|><|start|>user<|message|>Bye<|end|>" in text


def test_a_tool_error_reaches_the_model(turns: Any, enc: HarmonyEncoding) -> None:
    box = Toolbox([FunctionTools([get_weather, book_ferry])])
    call = turns(
        "<|channel|>commentary to=functions.book_ferry <|constrain|>json"
        '<|message|>{"day": "Sunday"}<|call|>'
    )
    unknown = turns("<|channel|>commentary to=functions.teleport<|message|>{}<|call|>")
    final = turns("<|channel|>final<|message|>No ferry on Sunday.<|return|>")
    engine = ScriptedEngine([call, unknown, final])
    result = Agent(engine, box).run_sync(new_conversation("Book a ferry", toolbox=box))
    assert result.stop_reason is StopReason.FINAL
    replies = [m for m in result.messages if m.author.role is Role.TOOL]
    assert (
        replies[0].text == "Error: functions.book_ferry failed: RuntimeError: no ferries on Sunday"
    )
    assert replies[1].text.startswith("Error:") and "functions.get_weather" in replies[1].text
    # The model read them: the next prompts end with the replies.
    assert "no ferries on Sunday" in enc.decode(list(engine.prompts[1]))
    assert enc.decode(list(engine.prompts[2])).endswith(
        f"<|message|>{replies[1].text}<|end|><|start|>assistant"
    )


def test_a_call_the_caller_answers_is_returned_then_resumed(turns: Any) -> None:
    box = Toolbox()
    box.declare(
        ToolNamespaceConfig(
            "functions",
            None,
            [
                ToolDescription.new("send_email", "Sends an email.", {"type": "object"}),
            ],
        )
    )
    call = turns(
        "<|channel|>commentary to=functions.send_email <|constrain|>json"
        '<|message|>{"to": "ada@example.org"}<|call|>'
    )
    final = turns("<|channel|>final<|message|>Sent.<|return|>")
    engine = ScriptedEngine([call, final])
    agent = Agent(engine, box)
    result = agent.run_sync(new_conversation("Mail Ada", toolbox=box))
    assert result.stop_reason is StopReason.TOOL_CALLS
    [pending] = result.tool_calls
    assert pending.recipient == "functions.send_email"
    assert result.conversation.messages[-1] == pending

    reply = (
        Message.from_author_and_content(
            Author(Role.TOOL, "functions.send_email"),
            '{"ok": true}',
        )
        .with_recipient("assistant")
        .with_channel("commentary")
    )
    resumed = agent.run_sync(Conversation.from_messages([*result.conversation.messages, reply]))
    assert resumed.stop_reason is StopReason.FINAL and resumed.answer == "Sent."


def test_a_callback_answers_undeclared_calls_sync_or_async(turns: Any) -> None:
    call = turns('<|channel|>commentary to=functions.lookup<|message|>{"k": 1}<|call|>')
    final = turns("<|channel|>final<|message|>ok<|return|>")
    seen: list[str] = []

    async def answer(message: Message) -> str:
        seen.append(message.text)
        return "value-1"

    agent = Agent(ScriptedEngine([call, call, final]), on_tool_call=answer)
    result = agent.run_sync(new_conversation("look up k"))
    assert result.stop_reason is StopReason.FINAL
    assert seen == ['{"k": 1}', '{"k": 1}']
    replies = [m for m in result.messages if m.author.role is Role.TOOL]
    assert [(r.author.name, r.text, r.channel) for r in replies] == [
        ("functions.lookup", "value-1", "commentary")
    ] * 2

    def broken(message: Message) -> str:
        raise KeyError("k")

    agent = Agent(ScriptedEngine([call, final]), on_tool_call=broken)
    result = agent.run_sync(new_conversation("look up k"))
    assert result.messages[1].text == "Error: functions.lookup failed: KeyError: 'k'"


def test_the_step_limit(turns: Any, fake_python: Any) -> None:
    call = turns("<|channel|>analysis to=python code<|message|>1 + 1<|call|>")
    engine = ScriptedEngine([call] * 5)
    box = Toolbox([fake_python()])
    agent = Agent(engine, box, limits=AgentLimits(max_steps=2))
    result = agent.run_sync(new_conversation("loop", toolbox=box))
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.steps == 2 and len(engine.prompts) == 2
    assert result.conversation.messages[-1].author.name == "python"


def test_the_token_limit_spans_steps(turns: Any, fake_python: Any) -> None:
    call = turns("<|channel|>analysis to=python code<|message|>1 + 1<|call|>")
    rambling = Script(turns("<|channel|>analysis<|message|>") + turns("hmm ") * 3, repeat=True)
    engine = ScriptedEngine([call, rambling])
    box = Toolbox([fake_python()])
    budget = len(call) + 7
    agent = Agent(engine, box, limits=AgentLimits(max_tokens=budget))
    result = agent.run_sync(new_conversation("think", toolbox=box))
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert result.usage.completion_tokens == budget
    assert result.partial is not None and result.partial.channel == "analysis"
    assert result.partial.text.startswith("hmm")
    assert result.partial not in result.conversation.messages


def _second_prompt_length(turns: Any, fake_python: Any) -> int:
    """The ids of the prompt a tool call's reply makes for the next step."""
    call = turns("<|channel|>analysis to=python code<|message|>1 + 1<|call|>")
    answer = turns("<|channel|>final<|message|>2<|return|>")
    engine = ScriptedEngine([call, answer])
    box = Toolbox([fake_python()])
    Agent(engine, box).run_sync(new_conversation("think", toolbox=box))
    return len(engine.prompts[1])


def test_each_step_fits_the_context_window(turns: Any, fake_python: Any) -> None:
    second = _second_prompt_length(turns, fake_python)
    call = turns("<|channel|>analysis to=python code<|message|>1 + 1<|call|>")
    rambling = Script(turns("<|channel|>analysis<|message|>") + turns("hmm ") * 3, repeat=True)
    engine = ScriptedEngine([call, rambling])
    box = Toolbox([fake_python()])
    # Room for 5 ids after the second prompt: that step is cut there, not refused.
    agent = Agent(engine, box, limits=AgentLimits(context_tokens=second + 5))
    result = agent.run_sync(new_conversation("think", toolbox=box))
    assert len(engine.prompts[1]) == second
    assert result.stop_reason is StopReason.LENGTH
    assert result.usage.completion_tokens == len(call) + 5


def test_a_prompt_that_fills_the_context_window_ends_the_run(turns: Any, fake_python: Any) -> None:
    second = _second_prompt_length(turns, fake_python)
    call = turns("<|channel|>analysis to=python code<|message|>1 + 1<|call|>")
    engine = ScriptedEngine([call, call])
    box = Toolbox([fake_python()])
    agent = Agent(engine, box, limits=AgentLimits(context_tokens=second))
    result = agent.run_sync(new_conversation("think", toolbox=box))
    assert result.stop_reason is StopReason.LENGTH
    assert result.steps == 1 and len(engine.prompts) == 1
    assert result.conversation.messages[-1].author.name == "python"  # the reply is kept


def test_one_generation_hitting_its_max_tokens_is_length(turns: Any) -> None:
    rambling = turns("<|channel|>final<|message|>") + turns("la") * 50
    agent = Agent(ScriptedEngine([rambling]), params=SamplingParams(max_tokens=9))
    result = agent.run_sync(new_conversation("sing"))
    assert result.stop_reason is StopReason.LENGTH
    assert result.usage.completion_tokens == 9
    assert result.partial is not None and result.partial.text == "la" * 6


def test_cancellation_mid_stream(turns: Any) -> None:
    analysis = turns("<|channel|>analysis<|message|>Thinking hard.<|end|>")
    answer = turns("<|start|>assistant<|channel|>final<|message|>The answer is")
    # The engine goes silent after "The answer is", as a slow model would.
    slow = Script(analysis + answer, delay=0.005, stall_after=len(analysis) + len(answer))
    engine = ScriptedEngine([slow])

    async def main() -> tuple[Any, list[Any]]:
        run = Agent(engine).run(new_conversation("?"))
        events = []
        async for event in run:
            events.append(event)
            if (
                isinstance(event, FinalDelta)
                and "".join(e.text for e in events if isinstance(e, FinalDelta)) == "The answer is"
            ):
                run.cancel()  # the engine has stalled: only the cancel ends the run
        return await run.result(), events

    result, events = asyncio.run(asyncio.wait_for(main(), 60))
    assert result.stop_reason is StopReason.CANCELLED
    assert isinstance(events[-1], Done) and events[-1].result is result
    # The finished analysis is kept; the answer cut short is only the partial message.
    assert [m.channel for m in result.messages] == ["analysis"]
    assert result.partial is not None and result.partial.text == "The answer is"


def test_cancellation_while_a_tool_runs(turns: Any, fake_python: Any) -> None:
    call = turns("<|channel|>analysis to=python code<|message|>1<|call|>")
    box = Toolbox([fake_python(delay=30.0)])

    async def main() -> Any:
        run = Agent(ScriptedEngine([call]), box).run(new_conversation("?", toolbox=box))
        async for event in run:
            if isinstance(event, ToolCallStarted):
                asyncio.get_running_loop().call_later(0.05, run.cancel)
        return await run.result()

    result = asyncio.run(main())
    assert result.stop_reason is StopReason.CANCELLED
    assert result.conversation.messages[-1].recipient == "python"


def test_the_wall_time_limit(turns: Any) -> None:
    stalled = Script(turns("<|channel|>final<|message|>wait for it"), stall_after=3)
    agent = Agent(ScriptedEngine([stalled]), limits=AgentLimits(max_seconds=0.2))
    started = time.perf_counter()
    result = agent.run_sync(new_conversation("?"))
    assert result.stop_reason is StopReason.MAX_SECONDS
    assert time.perf_counter() - started > 0.15  # the stall never ends: only the limit stops it


def test_engine_errors_and_bad_model_output_end_the_run_plainly(turns: Any) -> None:
    text = turns("<|channel|>final<|message|>Hello there")
    failing = Script(text, fail_after=3)
    result = Agent(ScriptedEngine([failing])).run_sync(new_conversation("?"))
    assert result.stop_reason is StopReason.ERROR
    assert isinstance(result.error, EngineError)

    garbage = turns("<|channel|>final<|message|>a<|end|>stray text<|return|>")
    result = Agent(ScriptedEngine([garbage])).run_sync(new_conversation("?"))
    assert result.stop_reason is StopReason.ERROR
    assert isinstance(result.error, ModelOutputError)
    assert [m.text for m in result.messages] == ["a"]

    no_tool = turns("<|channel|>commentary<|message|>calling nobody<|call|>")
    result = Agent(ScriptedEngine([no_tool])).run_sync(new_conversation("?"))
    assert result.stop_reason is StopReason.ERROR
    assert "<|call|>" in str(result.error)


def test_run_sync_refuses_a_running_loop_and_reports_events() -> None:
    from harmonia import InputError

    agent = Agent(ScriptedEngine([]))

    async def main() -> None:
        with pytest.raises(InputError, match="running event loop"):
            agent.run_sync(new_conversation("?"))

    asyncio.run(main())


def test_an_engine_that_refuses_the_request_ends_the_run_with_its_error() -> None:
    from harmonia.engines import UnsupportedConstraintError

    class Refusing(ScriptedEngine):
        def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Any:
            raise UnsupportedConstraintError("refusing: no grammar support", engine="refusing")

    result = Agent(Refusing([])).run_sync(new_conversation("?"))
    assert result.stop_reason is StopReason.ERROR
    assert isinstance(result.error, UnsupportedConstraintError) and result.steps == 1
