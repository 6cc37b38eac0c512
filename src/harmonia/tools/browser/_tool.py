"""The browser tool runtime: ``browser.search``, ``browser.open`` and ``browser.find``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from harmonia import InputError, ToolError, ToolNamespaceConfig

from .._base import ToolCall, ToolOutput
from ._args import get_int, get_str, parse_arguments
from ._citations import CitationStream, CitationStyle, UrlCitation, convert_citations
from ._display import VIEW_TOKENS, render_view, shorten, view_end, wrap_lines
from ._find import find_in_page
from ._page import Page, SearchResult, results_page
from ._state import BrowserState
from .backends._base import VIEW_SOURCE_PREFIX, Backend

MAX_SEARCH_RESULTS = 20
DEFAULT_TOPN = 10
# Opening a find hit or a search hit starts this many lines above it, for context.
_LINES_ABOVE_HIT = 4


def _failed(what: str, error: Exception, tool: str) -> ToolError:
    """A backend's failure as the model reads it (the backend's words cut short)."""
    return ToolError(f"{what}: {shorten(str(error)) or type(error).__name__}", tool=tool)


async def _results_page(query: str, results: list[SearchResult]) -> Page:
    # HTML results are converted in a worker thread (bounded work: titles and
    # summaries are cut), so the event loop keeps serving other calls.
    if any(result.html for result in results):
        return await asyncio.to_thread(results_page, query, results)
    return results_page(query, results)


class BrowserTool:
    """The gpt-oss built-in browser over any :class:`Backend`.

    Every call pushes a page on :attr:`state` (save it with ``state.to_dict()``,
    resume with ``state=``) and returns its display; problems the model can fix
    raise :class:`harmonia.ToolError` naming what is valid. ``view_tokens`` is a
    viewport's o200k budget without ``num_lines``; ``max_results`` caps ``topn``.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        state: BrowserState | None = None,
        view_tokens: int = VIEW_TOKENS,
        max_results: int = MAX_SEARCH_RESULTS,
        owns_backend: bool = True,
    ) -> None:
        if view_tokens < 1 or max_results < 1:
            raise InputError("view_tokens and max_results must be positive integers")
        self.backend = backend
        self.state = state if state is not None else BrowserState()
        self.view_tokens = view_tokens
        self.max_results = max_results
        self.owns_backend = owns_backend  # False: a shared backend its owner closes
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"BrowserTool(backend={self.backend!r}, pages={len(self.state)})"

    @property
    def namespace(self) -> str:
        """Always ``"browser"``: the built-in namespace gpt-oss calls."""
        return "browser"

    def namespace_config(self) -> ToolNamespaceConfig:
        """The built-in declaration, its ``sources=`` naming this backend's source."""
        config = ToolNamespaceConfig.browser()
        description = (config.description or "").replace(
            "sources=web (default: web)",
            f"sources={self.backend.source} (default: {self.backend.source})",
        )
        return ToolNamespaceConfig(config.name, description, config.tools)

    async def aclose(self) -> None:
        """Close the backend (its database or HTTP client), unless it is borrowed."""
        if self.owns_backend:
            await self.backend.aclose()

    # -- calls ------------------------------------------------------------

    async def call(self, call: ToolCall) -> ToolOutput:
        """Run ``browser.search``/``open``/``find`` with the call's JSON arguments."""
        name = call.name
        if name not in ("search", "open", "find"):
            what = f"Unknown browser function `{name}`." if name else "`browser` is not callable."
            raise ToolError(
                f"{what} Call `browser.search`, `browser.open` or `browser.find`.",
                tool=call.recipient,
            )
        args = parse_arguments(name, call.arguments)
        tool = f"browser.{name}"
        if name == "search":
            topn = get_int(args, "topn", get_int(args, "top_n", DEFAULT_TOPN, tool), tool)
            return await self.search(get_str(args, "query", tool), topn=topn)
        if name == "find":
            return await self.find(
                get_str(args, "pattern", tool), cursor=get_int(args, "cursor", -1, tool)
            )
        link = args.get("id", -1)
        if isinstance(link, str):
            # Models sometimes quote a link id; a URL is never all digits.
            link = int(link) if link.strip().isdigit() else link
        else:
            link = get_int(args, "id", -1, tool)
        view_source = args.get("view_source", False)
        if not isinstance(view_source, bool):
            raise ToolError("`view_source` must be true or false.", tool=tool)
        return await self.open(
            link,
            cursor=get_int(args, "cursor", -1, tool),
            loc=get_int(args, "loc", -1, tool),
            num_lines=get_int(args, "num_lines", -1, tool),
            view_source=view_source,
        )

    async def search(self, query: str, *, topn: int = DEFAULT_TOPN) -> ToolOutput:
        """Search the backend and show the results page (``topn`` capped at ``max_results``)."""
        if topn < 1:
            raise ToolError(
                f"`topn` must be at least 1 (at most {self.max_results}).", tool="browser.search"
            )
        topn = min(topn, self.max_results)
        try:
            results = await self.backend.search(query, topn)
        except Exception as e:
            raise _failed(f"Error during search for `{shorten(query)}`", e, "browser.search") from e
        page = await _results_page(query, list(results)[:topn])
        return self._show(page, 0, -1, "browser.search")

    async def open(
        self,
        id: int | str = -1,
        *,
        cursor: int = -1,
        loc: int = -1,
        num_lines: int = -1,
        view_source: bool = False,
    ) -> ToolOutput:
        """Open a URL, follow link ``id`` of the page at ``cursor``, or scroll that page."""
        page: Page | None = None
        hit_line: int | None = None
        if isinstance(id, str):
            url = id
        else:
            current = self.state.page(cursor)
            if id >= 0:
                if id not in current.links:
                    raise ToolError(self._bad_link(id, cursor, current), tool="browser.open")
                url = current.links[id]
                hit_line = current.hit_lines.get(id)
                page = self.state.latest_with_url(url)
                if page is None and current.kind == "find" and current.source_url == "":
                    # A hit of `find` in search results reopens the newest results
                    # page (the reference keeps pages by URL, and results have URL "").
                    page = self.state.latest_with_url(url, "search")
            else:
                url, page = current.url, current
        if view_source:
            url, page = VIEW_SOURCE_PREFIX + url, None
        if page is None:
            try:
                page = await self.backend.fetch(url)
            except Exception as e:
                raise _failed(f"Error fetching URL `{shorten(url)}`", e, "browser.open") from e
        if loc < 0:
            loc = 0 if hit_line is None else hit_line
            if loc > _LINES_ABOVE_HIT:
                loc -= _LINES_ABOVE_HIT
        return self._show(page, loc, num_lines, "browser.open")

    async def find(self, pattern: str, *, cursor: int = -1) -> ToolOutput:
        """Find ``pattern`` (case-insensitive) in the page at ``cursor``; shows a page of hits."""
        page = self.state.page(cursor)
        if page.kind == "find":
            # The reference's words; it allows `find` in search results (so do we).
            raise ToolError(
                "Cannot run `find` on search results page or find results page. "
                "Open a hit first, then `find` in it.",
                tool="browser.find",
            )
        if not pattern:
            raise ToolError("`find` needs a non-empty `pattern`.", tool="browser.find")
        return self._show(find_in_page(pattern, page), 0, -1, "browser.find")

    def run(self, name: str, **arguments: Any) -> str:
        """Synchronous convenience: one call by keyword arguments, returning the display text.

        Errors come back as their message, as the model would read them. Not
        for use inside a running event loop (``await tool.call(...)`` there).
        Calls share one private event loop, so a backend's HTTP client outlives
        a call; :meth:`close` releases both.
        """
        call = ToolCall(f"browser.{name}", "browser", name, json.dumps(arguments))
        try:
            return self._sync_loop().run_until_complete(self.call(call)).text
        except ToolError as e:
            return str(e)

    def close(self) -> None:
        """Synchronous :meth:`aclose`, for code that used :meth:`run`."""
        loop = self._sync_loop()
        try:
            loop.run_until_complete(self.aclose())
        finally:
            loop.close()
            self._loop = None

    def _sync_loop(self) -> asyncio.AbstractEventLoop:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise InputError("BrowserTool.run() cannot be used inside an event loop; await call()")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    # -- citations --------------------------------------------------------

    def convert_citations(
        self, text: str, *, style: CitationStyle = "markdown"
    ) -> tuple[str, list[UrlCitation]]:
        """Resolve ``【cursor†La-Lb】`` citations against this conversation's pages."""
        return convert_citations(text, self.state, style=style)

    def citation_stream(self, *, style: CitationStyle = "markdown") -> CitationStream:
        """A :class:`CitationStream` over this conversation's pages."""
        return CitationStream(self.state, style=style)

    # -- helpers ----------------------------------------------------------

    def _bad_link(self, link: int, cursor: int, page: Page) -> str:
        where = f"cursor {cursor if cursor >= 0 else self.state.cursor}"
        if not page.links:
            return f"Invalid link id `{link}`: the page at {where} has no links."
        ids = sorted(page.links)
        return (
            f"Invalid link id `{link}`. Valid link ids on the page at {where}: {ids[0]}-{ids[-1]}."
        )

    def _show(self, page: Page, loc: int, num_lines: int, tool: str) -> ToolOutput:
        lines = wrap_lines(page.text)
        last = len(lines) - 1
        if loc > last:
            raise ToolError(
                f"Invalid location parameter: `{loc}`. Cannot exceed page maximum of {last}. "
                f"Valid locations are 0 to {last}.",
                tool=tool,
            )
        end = view_end(lines, loc, num_lines, self.view_tokens)
        cursor = self.state.push(page)
        text = render_view(page, cursor, lines, loc, end)
        metadata = {"cursor": cursor, "url": page.url, "title": page.title, "lines": [loc, end - 1]}
        return ToolOutput(text, metadata)
