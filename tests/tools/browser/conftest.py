"""Shared helpers for the browser tests: fixture paths, a dict backend, a call helper."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from harmonia import ToolError
from harmonia.tools import ToolCall, ToolOutput
from harmonia.tools.browser import BrowserTool, Page, SearchResult

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"


class DictBackend:
    """Serves pages from a dict and canned search results; records calls."""

    source = "web"

    def __init__(self, pages: dict[str, Page], results: list[SearchResult] | None = None) -> None:
        self.pages = pages
        self.results = results or []
        self.fetched: list[str] = []
        self.searches: list[tuple[str, int]] = []

    async def search(self, query: str, topn: int) -> list[SearchResult]:
        self.searches.append((query, topn))
        return self.results[:topn]

    async def fetch(self, url: str) -> Page:
        self.fetched.append(url)
        if url not in self.pages:
            raise KeyError(url)
        return self.pages[url]

    async def aclose(self) -> None:
        pass


def _call(tool: BrowserTool, name: str, **args: Any) -> ToolOutput:
    """Run one browser call the way the dispatcher would (JSON arguments)."""
    request = ToolCall(f"browser.{name}", "browser", name, json.dumps(args))
    return asyncio.run(tool.call(request))


def _call_error(tool: BrowserTool, name: str, **args: Any) -> str:
    """The ToolError message one call raises (fails the test if it succeeds)."""
    with pytest.raises(ToolError) as info:
        _call(tool, name, **args)
    return str(info.value)


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "golden" / "reference_sessions.json").read_text())
    return data


@pytest.fixture(scope="session")
def run() -> Any:
    """``run(tool, name, **args)``: one call through ``BrowserTool.call``."""
    return _call


@pytest.fixture(scope="session")
def run_error() -> Any:
    """``run_error(tool, name, **args)``: the ToolError message of a failing call."""
    return _call_error


@pytest.fixture(scope="session")
def backend_cls() -> type[DictBackend]:
    return DictBackend


@pytest.fixture(scope="session")
def fixture_pages() -> dict[str, Page]:
    """The fixture files as pages, at the URLs the golden sessions used."""
    from harmonia.tools.browser import html_to_page, markdown_to_page

    pages = {}
    for url, name in [
        ("https://example.org/guide/article.html", "article.html"),
        ("https://example.org/short.html", "short.html"),
    ]:
        pages[url] = html_to_page((FIXTURES / name).read_text(encoding="utf-8"), url)
    for name in ("notes.md", "cjk.md"):
        url = "file:///corpus/" + name
        pages[url] = markdown_to_page((FIXTURES / name).read_text(encoding="utf-8"), url)
    return pages
