"""``ToolsSpec``: the built-in tools' settings, one ``build()`` for every command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harmonia import InputError
from harmonia.tools import ToolsSpec
from harmonia.tools.browser import (
    BrowserTool,
    ExaBackend,
    LocalCorpusBackend,
    YouComBackend,
    fts5_available,
)

FUNCTIONS = """
from harmonia.tools import function_tool

@function_tool
def add(a: int, b: int) -> int:
    '''Add two numbers.'''
    return a + b
"""


def test_no_browser_is_no_tool() -> None:
    assert ToolsSpec().build().namespaces == []
    with pytest.raises(InputError, match="needs --browser DIR|exa|you"):
        ToolsSpec().backend()


def test_the_browser_word_names_a_web_search(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("httpx", reason="the web backends need httpx (harmonia[browser-web])")
    monkeypatch.setenv("EXA_API_KEY", "test-key")
    monkeypatch.setenv("YDC_API_KEY", "test-key")
    assert isinstance(ToolsSpec(browser="exa").backend(), ExaBackend)
    assert isinstance(ToolsSpec(browser="you").backend(), YouComBackend)


def test_a_folder_that_is_not_there_is_refused_in_words(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a folder; give a folder"):
        ToolsSpec(browser=str(tmp_path / "missing")).backend()


@pytest.mark.skipif(not fts5_available(), reason="the corpus search here uses SQLite FTS5")
def test_a_folder_is_indexed_into_the_index_file(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    index = tmp_path / "index.sqlite"
    backend = ToolsSpec(browser=str(tmp_path), browser_index=str(index)).backend(index=True)
    assert isinstance(backend, LocalCorpusBackend)
    backend.close()
    assert index.stat().st_size > 0  # kept between runs, as --browser-index says


def test_the_python_settings_reach_the_tool_config() -> None:
    pytest.importorskip("jupyter_client", reason="the python extra (jupyter_client) is missing")
    config = ToolsSpec(timeout=7.5, dangerously_allow_unsandboxed=True).python_config()
    assert config.timeout == 7.5 and config.dangerously_allow_unsandboxed
    assert ToolsSpec().python_config().timeout > 7.5  # the tool's own default


def test_python_is_refused_where_the_sandbox_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jupyter_client", reason="the python extra (jupyter_client) is missing")
    from harmonia.tools import python
    from harmonia.tools.python import SandboxStatus

    monkeypatch.setattr(python, "sandbox_status", lambda: SandboxStatus(False, "no bwrap"))
    with pytest.raises(InputError, match="--python: the sandbox cannot start here: no bwrap"):
        ToolsSpec(python=True).build()
    box = ToolsSpec(python=True, dangerously_allow_unsandboxed=True).build()
    assert box.namespaces == ["python"]


def test_build_offers_the_browser_and_the_functions(tmp_path: Path) -> None:
    module = tmp_path / "my_functions.py"
    module.write_text(FUNCTIONS, encoding="utf-8")
    box = ToolsSpec(browser=str(tmp_path), functions=str(module)).build()
    assert isinstance(box.tool("browser"), BrowserTool)
    assert "functions" in box.namespaces
    asyncio.run(box.aclose())


def test_a_module_without_function_tools_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(InputError, match="defines no function tools"):
        ToolsSpec(functions=str(empty)).build()
    with pytest.raises(InputError, match="no such file"):
        ToolsSpec(functions=str(tmp_path / "missing.py")).build()
