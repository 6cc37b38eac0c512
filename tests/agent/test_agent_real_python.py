"""The loop with the real sandboxed python tool and the real corpus browser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from harmonia.agent import Agent, StopReason, ToolResultReceived, new_conversation
from harmonia.engines import ScriptedEngine
from harmonia.tools import Toolbox
from harmonia.tools.browser import BrowserTool, LocalCorpusBackend

python_tool = pytest.importorskip("harmonia.tools.python")
pytest.importorskip("jupyter_client", reason="the python tool needs harmonia[python]")


def test_browser_then_sandboxed_python_then_answer(turns: Any, corpus: Path) -> None:
    status = python_tool.sandbox_status()
    if not status.ok:
        pytest.skip(f"the python sandbox cannot start here: {status.reason}")
    browser = BrowserTool(LocalCorpusBackend(corpus))
    python = python_tool.PythonTool(python_tool.PythonToolConfig(timeout=30))
    box = Toolbox([browser, python])
    scripts = [
        turns(
            '<|channel|>analysis to=browser.search code<|message|>{"query": "lunar day"}<|call|>'
        ),
        turns(
            "<|channel|>analysis to=python code<|message|>"
            "import os\nprint(7 * 24 * 60 / (12 * 60 + 25), os.getcwd())<|call|>"
        ),
        turns("<|channel|>final<|message|>About 13.5 high waters a week.<|return|>"),
    ]
    events: list[Any] = []
    agent = Agent(ScriptedEngine(scripts), box)
    result = agent.run_sync(new_conversation("tides?", toolbox=box), on_event=events.append)
    asyncio.run(box.aclose())  # stops the kernel
    assert result.stop_reason is StopReason.FINAL
    replies = [e.reply.text for e in events if isinstance(e, ToolResultReceived)]
    assert "24 hours and 50 minutes" in replies[0]
    # The kernel really ran the code (the sandbox's working directory is /mnt/data).
    assert replies[1].split() == [str(7 * 24 * 60 / 745), "/mnt/data"]
