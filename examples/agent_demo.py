"""The agent loop with real tools, offline: ``python examples/agent_demo.py`` (or ``make demo``).

A scripted engine plays a gpt-oss-style turn: it searches the small corpus in
``examples/corpus``, opens a page, runs Python in the sandbox (or says why the
sandbox is unavailable) and answers with a citation. The model's words are
replayed; the browser and python outputs are the real tools' outputs, and the
final step reads its number from the real python reply, as a model would.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

from harmonia import HarmonyEncodingName, RenderConversationConfig, load_harmony_encoding
from harmonia.agent import Agent, AgentLimits, TerminalView, new_conversation, use_color
from harmonia.engines import Script, ScriptedEngine
from harmonia.tools import Toolbox
from harmonia.tools.browser import BrowserTool, LocalCorpusBackend

CORPUS = Path(__file__).resolve().parent / "corpus"
QUESTION = "How many high waters does a tidal harbour see in a week?"

SEARCH = (
    "<|channel|>analysis<|message|>The user asks about high waters per week. The corpus should "
    "say how often high water comes back; search it.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.search code<|message|>"
    '{"query": "tides lunar day high water"}<|call|>'
)
OPEN = (
    "<|channel|>analysis<|message|>The Tides page looks right; open it.<|end|>"
    '<|start|>assistant<|channel|>analysis to=browser.open code<|message|>{"id": 0}<|call|>'
)
PYTHON = (
    "<|channel|>analysis<|message|>High water every 12 h 25 min. Compute the count for 7 days."
    "<|end|><|start|>assistant<|channel|>analysis to=python code<|message|>"
    "period = 12 * 60 + 25  # minutes between high waters\n"
    "print(round(7 * 24 * 60 / period, 2))<|call|>"
)
ANSWER = (
    "<|channel|>analysis<|message|>{reasoning}<|end|>"
    "<|start|>assistant<|channel|>final<|message|>High water comes back every 12 hours and "
    "25 minutes【1†L6-L7】, so a tidal harbour sees {count} high waters in a week: "
    "{detail}<|return|>"
)


def scripted_model(enc: Any, with_python: bool) -> ScriptedEngine:
    """The model's side of the turn; the last step reads the python result from its prompt."""
    steps = [SEARCH, OPEN, PYTHON] if with_python else [SEARCH, OPEN]

    replayed = 0

    def next_completion(prompt: tuple[int, ...]) -> Script:
        nonlocal replayed
        replayed += 1
        if replayed <= len(steps):
            text = steps[replayed - 1]
        else:
            text = ANSWER.format(**final_words(enc.decode(list(prompt)), with_python))
        # Paced like a fast model, so the stream is visible.
        return Script(tuple(enc.encode(text, allowed_special="all")), delay=0.004)

    return ScriptedEngine(next_completion)


def final_words(prompt: str, with_python: bool) -> dict[str, str]:
    replies = re.findall(
        r"<\|start\|>python to=assistant.*?<\|message\|>(.*?)<\|end\|>", prompt, re.S
    )
    if with_python and replies and re.fullmatch(r"\s*[\d.]+\s*", replies[-1]):
        value = float(replies[-1])
        return {
            "reasoning": f"Python says {value}. Answer with the citation.",
            "count": f"about {value:g}",
            "detail": f"7 × 24 h ÷ 12 h 25 min = {value:g}, so 13 or 14 depending on the start.",
        }
    return {
        "reasoning": "No python result; estimate by hand.",
        "count": "about 13 or 14",
        "detail": "two a lunar day, and a week is about 6.8 lunar days.",
    }


def python_tool() -> tuple[Any, str | None]:
    """The sandboxed python tool, or None and the reason it cannot run here."""
    try:
        import jupyter_client  # noqa: F401  (the tool's kernel needs it)

        from harmonia.tools.python import PythonTool, PythonToolConfig, sandbox_status
    except ImportError as exc:
        return None, f"the python tool needs harmonia[python] ({exc})"
    status = sandbox_status()
    if not status.ok:
        return None, status.reason
    return PythonTool(PythonToolConfig(timeout=30)), None


async def main() -> int:
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    out = sys.stdout
    color = use_color(out)
    dim = (lambda s: f"\x1b[2m{s}\x1b[0m") if color else (lambda s: s)
    print(dim("scripted engine: the model's words are replayed, the tools are real"))
    browser = BrowserTool(LocalCorpusBackend(CORPUS))
    python, why_not = python_tool()
    box = Toolbox([browser] if python is None else [browser, python])
    if python is None:
        print(f"python sandbox unavailable: {why_not}\n(the turn goes on without python)")
    engine = scripted_model(enc, with_python=python is not None)
    agent = Agent(engine, box, encoding=enc, limits=AgentLimits(max_steps=6, max_seconds=60))
    conversation = new_conversation(QUESTION, toolbox=box, reasoning_effort="low")
    print(f"user: {QUESTION}")
    view = TerminalView(out, color=color, citations=browser)
    try:
        run = agent.run(conversation)
        async for event in run:
            view.show(event)
        result = await run.result()
    finally:
        await agent.aclose()
    # History keeps the whole turn (the sampled <|return|> written <|end|>) and parses back to
    # the same messages; the next turn's prompt drops this turn's reasoning and built-in calls.
    history = enc.render_conversation(
        result.conversation, RenderConversationConfig(cot_policy="keep_all")
    )
    parsed = enc.parse_messages_from_completion_tokens(history, None)
    same = [m.to_dict() for m in parsed[-len(result.messages) :]] == [
        m.to_dict() for m in result.messages
    ]
    next_prompt = enc.render_conversation(
        result.conversation, RenderConversationConfig(cot_policy="guide")
    )
    print(
        dim(
            f"history: {len(result.conversation.messages)} messages, {len(history)} tokens, "
            f"{'parses back to itself' if same else 'DOES NOT PARSE BACK'}; "
            f"the next turn's prompt keeps {len(next_prompt)} tokens of it"
        )
    )
    return 0 if result.answer else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
