"""BrowserTool: cursor semantics, argument errors, state resumption, the Tool protocol."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from harmonia import InputError, ToolError, ToolNamespaceConfig
from harmonia.tools import Tool, ToolCall
from harmonia.tools.browser import BrowserState, BrowserTool, Page, SearchResult

A = "https://example.org/a"
B = "https://example.org/b"
C = "https://other.net/c"


def _pages() -> dict[str, Page]:
    body_a = "\n".join(f"line {i} of a" for i in range(30)) + "\nsee 【0†b】 and 【1†c†other.net】"
    return {
        A: Page(A, "Page A", body_a, {0: B, 1: C}),
        B: Page(B, "Page B", "b one\nb two\nthe tower\nb four\nb five\nb six\nb seven"),
        C: Page(C, "Page C", "c"),
    }


RESULTS = [SearchResult(A, "Page A", "about a"), SearchResult(B, "Page B", "about b", line=6)]


@pytest.fixture
def tool(backend_cls: Any) -> BrowserTool:
    return BrowserTool(backend_cls(_pages(), RESULTS))


def test_every_call_pushes_a_cursor(tool: BrowserTool, run: Any) -> None:
    assert run(tool, "search", query="a").metadata["cursor"] == 0
    assert run(tool, "open", id=0).metadata["cursor"] == 1  # follow result 0
    assert run(tool, "open", loc=5, num_lines=2).text.startswith("[2] Page A (")  # a scroll
    assert run(tool, "find", pattern="line 1").metadata["cursor"] == 3
    assert len(tool.state) == 4


def test_scroll_shows_the_requested_lines(tool: BrowserTool, run: Any) -> None:
    run(tool, "open", id=A)
    out = run(tool, "open", loc=3, num_lines=2)
    assert out.text == (
        f"[1] Page A ({A})\n**viewing lines [3 - 4] of 30**\n\nL3: line 3 of a\nL4: line 4 of a"
    )


def test_open_follows_link_of_a_given_cursor(tool: BrowserTool, run: Any) -> None:
    run(tool, "open", id=A)
    run(tool, "open", id=C)
    out = run(tool, "open", id=0, cursor=0)  # link 0 of page A, not of the newest page
    assert out.metadata["url"] == B
    assert out.text.startswith(f"[2] Page B ({B})")


def test_old_search_cursor_keeps_its_own_results(backend_cls: Any, run: Any) -> None:
    # The reference keys pages by URL and every results page has URL "": an old
    # search cursor would show the newest results. Here each cursor keeps its page.
    backend = backend_cls(_pages(), RESULTS)
    tool = BrowserTool(backend)
    run(tool, "search", query="first")
    backend.results = [SearchResult(C, "Page C", "about c")]
    run(tool, "search", query="second")
    out = run(tool, "open", id=0, cursor=0)
    assert out.metadata["url"] == A
    assert run(tool, "open", cursor=0).text.startswith("[3] first\n")


def test_topn_is_honoured_and_capped(backend_cls: Any, run: Any) -> None:
    backend = backend_cls(_pages(), RESULTS * 20)
    tool = BrowserTool(backend, max_results=5)
    run(tool, "search", query="q", topn=1)
    run(tool, "search", query="q", topn=50)
    run(tool, "search", query="q")
    assert backend.searches == [("q", 1), ("q", 5), ("q", 5)]
    assert "【1†" not in tool.state.page(0).text
    assert "topn" in run_error_text(tool, run, "search", query="q", topn=0)


def run_error_text(tool: BrowserTool, run: Any, name: str, **args: Any) -> str:
    with pytest.raises(ToolError) as info:
        run(tool, name, **args)
    return str(info.value)


def test_search_hit_with_a_line_opens_near_it(tool: BrowserTool, run: Any) -> None:
    run(tool, "search", query="q")
    assert run(tool, "open", id=1).metadata["lines"][0] == 2  # line 6, four lines of context


def test_find_hit_reopens_the_page_above_the_hit(tool: BrowserTool, run: Any) -> None:
    run(tool, "open", id=A)
    found = run(tool, "find", pattern="LINE 12")
    assert "L0: # 【0†match at L12】\nL1: line 12 of a\n" in found.text
    out = run(tool, "open", id=0)
    assert out.metadata["lines"][0] == 8
    assert out.metadata["cursor"] == 2


def test_out_of_range_values_name_the_valid_range(tool: BrowserTool, run_error: Any) -> None:
    assert "No pages" in run_error(tool, "open")
    asyncio.run(tool.open(A))
    assert "Available cursor indices: [0 - 0]" in run_error(tool, "open", cursor=4)
    assert "Valid locations are 0 to 30" in run_error(tool, "open", loc=31)
    assert "Valid link ids on the page at cursor 0: 0-1" in run_error(tool, "open", id=9)
    asyncio.run(tool.open(C))
    assert "has no links" in run_error(tool, "open", id=0)
    assert len(tool.state) == 2  # failed calls push nothing


def test_find_runs_in_search_results_as_the_reference_does(
    tool: BrowserTool, run: Any, run_error: Any
) -> None:
    # The reference refuses `find` only on find pages; refusing it on results
    # too shifted every later cursor by one against what the model was trained on.
    run(tool, "search", query="q")
    out = run(tool, "find", pattern="About B")
    assert out.metadata["cursor"] == 1
    assert (
        out.text.splitlines()[0]
        == "[1] Find results for text: `about b` in `q` (/find?pattern=about b)"
    )
    assert "L0: # 【0†match at L5】" in out.text
    assert "find results page" in run_error(tool, "find", pattern="a")
    # A hit reopens the results page (the reference keeps results under URL "").
    reopened = run(tool, "open", id=0)
    assert reopened.metadata["cursor"] == 2
    assert reopened.text.startswith("[2] q\n**viewing lines [1 - 5] of 5**")
    assert tool.convert_citations("x【1†L0】")[1] == []  # nothing to cite in results
    run(tool, "open", id=0)
    assert "non-empty" in run_error(tool, "find", pattern="", cursor=1)


def test_find_and_search_echo_at_most_1024_characters(tool: BrowserTool, run: Any) -> None:
    # A hostile model's pattern or query is not repeated whole into the reply.
    pattern = "zq" * 50_000
    run(tool, "open", id=A)
    out = run(tool, "find", pattern=pattern)
    header, _, _, body = out.text.split("\n", 3)
    assert len(header) < 3 * 1024 and len(body) < 1024 + 200  # with line numbers
    shown = tool.state.page(1).text
    assert "zq..." in header and shown.endswith("...`") and len(shown) < 1100
    search = run(tool, "search", query=pattern)
    assert len(search.text.splitlines()[0]) <= 1024 + 4


def test_a_hostile_title_is_cut_in_the_header(backend_cls: Any, run: Any) -> None:
    title = "T" * 100_000
    tool = BrowserTool(backend_cls({A: Page(A, title, "x")}))
    out = run(tool, "open", id=A)
    assert out.text.splitlines()[0] == f"[0] {'T' * 1021}... ({A})"


def test_argument_errors_speak_to_the_model(tool: BrowserTool, run_error: Any) -> None:
    bad_json = ToolCall("browser.search", "browser", "search", "{query: x}")
    with pytest.raises(ToolError, match="not valid JSON"):
        asyncio.run(tool.call(bad_json))
    with pytest.raises(ToolError, match=r"`browser.search`, `browser.open` or `browser.find`"):
        asyncio.run(tool.call(ToolCall("browser.click", "browser", "click", "{}")))
    with pytest.raises(ToolError, match="`browser` is not callable"):
        asyncio.run(tool.call(ToolCall("browser", "browser", None, "{}")))
    assert "Valid arguments: `cursor`, `pattern`" in run_error(tool, "find", patern="x")
    assert "`loc` must be an integer" in run_error(tool, "open", id=A, loc="top")
    assert "`loc` must be an integer" in run_error(tool, "open", id=A, loc=1.5)
    assert "needs `query`" in run_error(tool, "search")


def test_integral_floats_and_quoted_ids_are_accepted(tool: BrowserTool, run: Any) -> None:
    run(tool, "open", id=A, num_lines=2.0)
    assert run(tool, "open", loc="3", num_lines="1").metadata["lines"] == [3, 3]
    assert run(tool, "open", id="1", cursor=0).metadata["url"] == C


def test_backend_failures_become_tool_errors(backend_cls: Any, run_error: Any) -> None:
    class Broken(backend_cls):  # type: ignore[misc]
        async def search(self, query: str, topn: int) -> list[SearchResult]:
            raise ConnectionError("network down")

    tool = BrowserTool(Broken({}))
    assert run_error(tool, "search", query="q") == "Error during search for `q`: network down"
    assert run_error(tool, "open", id="https://nowhere.example/").startswith(
        "Error fetching URL `https://nowhere.example/`"
    )


def test_state_resumes_from_json(tool: BrowserTool, backend_cls: Any, run: Any) -> None:
    run(tool, "search", query="q")
    run(tool, "open", id=0)
    run(tool, "open", loc=2)
    run(tool, "find", pattern="line 2")
    saved = json.loads(json.dumps(tool.state.to_dict()))
    assert len(saved["pages"]) == 3  # the scroll shares its page
    resumed = BrowserTool(backend_cls(_pages()), state=BrowserState.from_dict(saved))
    assert (
        run(resumed, "open", id=1, cursor=0).metadata == run(tool, "open", id=1, cursor=0).metadata
    )
    assert resumed.state.page(3).kind == "find"
    with pytest.raises(InputError):
        BrowserState.from_dict({"pages": [], "stack": [0]})


def test_tool_protocol_and_declaration(tool: BrowserTool) -> None:
    assert isinstance(tool, Tool)
    assert tool.namespace == "browser"
    assert tool.namespace_config() == ToolNamespaceConfig.browser()  # a "web" backend


def test_declaration_names_another_source(backend_cls: Any) -> None:
    backend = backend_cls({})
    backend.source = "local"
    config = BrowserTool(backend).namespace_config()
    assert (config.description or "").endswith("sources=local (default: local)")
    assert [t.name for t in config.tools] == ["search", "open", "find"]


def test_sync_run(tool: BrowserTool) -> None:
    assert tool.run("open", id=C).startswith(f"[0] Page C ({C})")
    assert tool.run("open", id=5).startswith("Invalid link id `5`")
    tool.close()

    async def inside_a_loop() -> None:
        with pytest.raises(InputError, match="await call"):
            tool.run("open", id=C)

    asyncio.run(inside_a_loop())


def test_empty_search_results(backend_cls: Any, run: Any) -> None:
    tool = BrowserTool(backend_cls({}, []))
    assert run(tool, "search", query="nothing").text == (
        "[0] nothing\n**viewing lines [0 - 2] of 2**\n\nL0: \nL1: URL: \nL2: # Search Results"
    )


def test_a_borrowed_backend_stays_open() -> None:
    class Counting:
        source = "web"
        closed = 0

        async def search(self, query: str, topn: int) -> list[SearchResult]:
            return []

        async def fetch(self, url: str) -> Page:
            raise KeyError(url)

        async def aclose(self) -> None:
            self.closed += 1

    backend = Counting()
    asyncio.run(BrowserTool(backend, owns_backend=False).aclose())
    assert backend.closed == 0
    asyncio.run(BrowserTool(backend).aclose())
    assert backend.closed == 1
