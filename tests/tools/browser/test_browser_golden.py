"""Displays byte for byte with the gpt-oss reference browser (see golden/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from harmonia import ToolError
from harmonia.tools.browser import BrowserTool, SearchResult, html_to_page, results_page

pytest.importorskip("lxml", reason="HTML fixtures need the browser extra (lxml)")


def test_html_conversion_matches_reference(golden: dict[str, Any], fixture_pages: Any) -> None:
    for url, ref in golden["pages"].items():
        page = fixture_pages[url]
        assert page.title == ref["title"]
        assert page.text == ref["text"]
        assert {str(k): v for k, v in page.links.items()} == ref["urls"]


def test_html2text_escapes_are_kept_like_the_reference(fixture_pages: Any) -> None:
    # gpt-oss's attempt to disable html2text's Markdown escaping has no effect.
    text = fixture_pages["https://example.org/guide/article.html"].text
    assert "\n1\\. Not a list" in text and "\n\\- dash at the start" in text


def test_search_page_matches_reference(golden: dict[str, Any]) -> None:
    ref = golden["search"]
    results = [SearchResult(r["url"], r["title"], r["summary"]) for r in ref["reply"]["results"]]
    page = results_page(ref["query"], results)
    assert (page.title, page.text) == (ref["title"], ref["text"])
    assert {str(k): v for k, v in page.links.items()} == ref["urls"]


def test_search_page_built_from_html_results_matches_reference(golden: dict[str, Any]) -> None:
    # Web backends mark results as HTML: the page is built the reference's way.
    ref = golden["search"]
    results = [
        SearchResult(r["url"], r["title"], r["summary"], html=True) for r in ref["reply"]["results"]
    ]
    page = results_page(ref["query"], results)
    assert (page.title, page.text, page.kind) == (ref["title"], ref["text"], "search")
    assert {str(k): v for k, v in page.links.items()} == ref["urls"]


def _sessions(golden: dict[str, Any]) -> list[Any]:
    return [s for s in golden["sessions"] if s["page"] != "search"]


@pytest.mark.parametrize("index", range(8))
def test_session_matches_reference(
    index: int, golden: dict[str, Any], fixture_pages: Any, backend_cls: Any, run: Any
) -> None:
    session = _sessions(golden)[index]
    tool = BrowserTool(
        backend_cls(dict(fixture_pages)), view_tokens=session.get("view_tokens", 1024)
    )
    for step in session["steps"]:
        if not step["text"].startswith("["):  # the reference's error reply
            with pytest.raises(ToolError) as info:
                run(tool, step["fn"], **step["args"])
            # Our messages start like the reference's and then add the valid range.
            reference = step["text"].rstrip(".").split("`: ")[0]
            assert str(info.value).startswith(reference), (step, str(info.value))
            continue
        out = run(tool, step["fn"], **step["args"])
        assert out.text == step["text"], step["args"]
        assert out.metadata["cursor"] == step["cursor"]


def test_search_session_matches_reference(
    golden: dict[str, Any], backend_cls: Any, run: Any
) -> None:
    ref = golden["search"]
    results = [SearchResult(r["url"], r["title"], r["summary"]) for r in ref["reply"]["results"]]
    tool = BrowserTool(backend_cls({}, results))
    [step] = next(s for s in golden["sessions"] if s["page"] == "search")["steps"]
    assert run(tool, "search", **step["args"]).text == step["text"]


def test_every_golden_session_is_replayed(golden: dict[str, Any]) -> None:
    assert len(_sessions(golden)) == 8


def test_html_page_without_title_is_named_by_domain() -> None:
    page = html_to_page("<p>x</p>", "https://example.org/p")
    assert page.title == "example.org"
