"""The gpt-oss built-in browser: ``browser.search``, ``browser.open``, ``browser.find``.

:class:`BrowserTool` implements :class:`harmonia.tools.Tool` over a
:class:`Backend` (:class:`LocalCorpusBackend`, :class:`ExaBackend`,
:class:`YouComBackend`, or your own), shows pages exactly as gpt-oss's
reference browser does, and turns the model's ``【cursor†La-Lb】`` citations
into URL citations. Importing this package imports neither lxml nor httpx.
"""

from ._citations import CitationChunk, CitationStream, UrlCitation, convert_citations
from ._convert import PageConverter
from ._display import render_view, view_end, wrap_lines
from ._find import find_in_page
from ._html import html_to_page
from ._markdown import markdown_to_page, text_to_page
from ._page import Page, SearchResult, results_page
from ._state import BrowserState
from ._tool import BrowserTool
from .backends import (
    Backend,
    ExaBackend,
    IndexStats,
    LocalCorpusBackend,
    YouComBackend,
    fts5_available,
)

__all__ = [
    "Backend",
    "BrowserState",
    "BrowserTool",
    "CitationChunk",
    "CitationStream",
    "ExaBackend",
    "IndexStats",
    "LocalCorpusBackend",
    "Page",
    "PageConverter",
    "SearchResult",
    "UrlCitation",
    "YouComBackend",
    "convert_citations",
    "find_in_page",
    "fts5_available",
    "html_to_page",
    "markdown_to_page",
    "render_view",
    "results_page",
    "text_to_page",
    "view_end",
    "wrap_lines",
]
