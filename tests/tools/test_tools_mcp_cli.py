"""``harmonia tools serve-mcp``: the command serves a real runtime to a real MCP client."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest

import harmonia
from harmonia import Message, Role
from harmonia._cli.main import main
from harmonia.tools import Toolbox
from harmonia.tools.browser import fts5_available
from harmonia.tools.mcp import McpToolset

pytest.importorskip("mcp", reason="the MCP tests need harmonia[mcp]")


@pytest.mark.skipif(not fts5_available(), reason="the corpus search here uses SQLite FTS5")
def test_serve_mcp_browser_over_stdio_searches_the_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tides.md").write_text("# Tides\n\nSpring tides follow the new and full moon.\n")
    (corpus / "bread.md").write_text("# Bread\n\nDough rises when yeast ferments sugar.\n")
    src = str(Path(harmonia.__file__).parent.parent)
    env = {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "harmonia", "tools", "serve-mcp", "browser"]
    command += ["--browser", str(corpus), "--stdio"]

    async def run() -> tuple[str, Message | None]:
        toolset = McpToolset.stdio(command, env=env, connect_timeout=30)
        async with toolset, Toolbox([toolset]) as box:
            declaration = toolset.namespace_config()
            call = Message.from_role_and_content(Role.ASSISTANT, '{"query": "spring tide"}')
            call = call.with_recipient("browser.search").with_channel("analysis")
            return declaration.description or "", await box.dispatch(call)

    description, reply = asyncio.run(asyncio.wait_for(run(), 60))
    assert "sources=local" in description
    assert reply is not None and reply.author.name == "browser.search"
    assert "【0†Tides】" in reply.text and "Bread" not in reply.text.split("【1†")[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["browser"], "needs --browser DIR|exa|you"),
        (["browser", "--browser", "/nonexistent-harmonia-dir"], "not a folder"),
        (["python", "--browser", "x"], "--browser is a browser option"),
    ],
)
def test_serve_mcp_refuses_bad_options_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["tools", "serve-mcp", *argv], stdout=io.StringIO())
    err = capsys.readouterr().err
    assert status == 1 and says in err and err.count("\n") == 1, err


def test_serve_mcp_refuses_web_search_without_its_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("EXA_API_KEY", raising=False)
    status = main(["tools", "serve-mcp", "browser", "--browser", "exa"], stdout=io.StringIO())
    assert status == 1 and "EXA_API_KEY" in capsys.readouterr().err
