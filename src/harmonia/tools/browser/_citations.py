"""Citations: ``【{cursor}†L{a}(-L{b})?】`` in the model's answer, turned into URL citations.

A citation names a cursor, so it is resolved against the
:class:`~harmonia.tools.browser.BrowserState` of the conversation: the page at
that cursor gives the URL and title (a find page cites the page it searched).
Citations of unknown cursors, or of pages without a URL (search results), are
left as written. :class:`CitationStream` does the same on a stream of deltas,
holding back a citation split across deltas until it is complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from harmonia import InputError

from ._page import get_domain
from ._state import BrowserState

CitationStyle = Literal["markdown", "keep"]

_CITATION = re.compile(r"【(?P<cursor>\d+)†L(?P<start>\d+)(?:-L?(?P<end>\d+))?】")
# The longest tail that may still grow into a citation.
_PARTIAL = re.compile(r"【\d*(?:†(?:L\d*(?:-(?:L?\d*))?)?)?$")


@dataclass(frozen=True, slots=True)
class UrlCitation:
    """One resolved citation; offsets index the converted text (end exclusive)."""

    url: str
    title: str
    start_index: int
    end_index: int
    cursor: int
    start_line: int
    end_line: int

    def to_annotation(self) -> dict[str, Any]:
        """A Responses API ``url_citation`` annotation."""
        fields = ("url", "title", "start_index", "end_index")
        return {"type": "url_citation", **{name: getattr(self, name) for name in fields}}


def _target(state: BrowserState, cursor: int) -> tuple[str, str] | None:
    if not 0 <= cursor < len(state):
        return None
    page = state.page(cursor)
    if page.kind == "find":
        if not page.source_url:  # a find in search results: nothing to cite
            return None
        source = state.latest_with_url(page.source_url)
        return page.source_url, source.title if source else get_domain(page.source_url)
    if not page.url or page.kind == "search":
        return None
    return page.url, page.title


def _convert(
    text: str, state: BrowserState, style: CitationStyle, offset: int
) -> tuple[str, list[UrlCitation]]:
    if style not in ("markdown", "keep"):
        raise InputError(f"citation style must be 'markdown' or 'keep', not {style!r}")
    citations: list[UrlCitation] = []
    shift = offset  # where the converted text stands relative to ``text``

    def replace(m: re.Match[str]) -> str:
        nonlocal shift
        cursor = int(m["cursor"])
        target = _target(state, cursor)
        if target is None:
            return m.group(0)
        url, title = target
        # gpt-oss's answer format: a Markdown link to the domain, padded with spaces.
        shown = f" ([{get_domain(url) or title}]({url})) " if style == "markdown" else m.group(0)
        start, start_line = m.start() + shift, int(m["start"])
        end_line = int(m["end"]) if m["end"] else start_line
        citations.append(
            UrlCitation(url, title, start, start + len(shown), cursor, start_line, end_line)
        )
        shift += len(shown) - len(m.group(0))
        return shown

    return _CITATION.sub(replace, text), citations


def convert_citations(
    text: str, state: BrowserState, *, style: CitationStyle = "markdown"
) -> tuple[str, list[UrlCitation]]:
    """Resolve the citations in a final answer.

    ``style="markdown"`` replaces each by `` ([domain](url)) `` as the gpt-oss
    server does; ``"keep"`` leaves the text unchanged. Either way each resolved
    citation gives a :class:`UrlCitation` whose offsets span its text.

    >>> from harmonia.tools.browser import Page
    >>> state = BrowserState([Page("https://example.org/a", "A", "x")])
    >>> text, cites = convert_citations("Yes【0†L1-L2】.", state)
    >>> text
    'Yes ([example.org](https://example.org/a)) .'
    >>> cites[0].start_index, cites[0].end_index, cites[0].title
    (3, 43, 'A')
    """
    return _convert(text, state, style, 0)


@dataclass(frozen=True, slots=True)
class CitationChunk:
    """What a :class:`CitationStream` releases for one delta."""

    text: str
    citations: list[UrlCitation]


class CitationStream:
    """Convert citations in a streamed answer, delta by delta.

    Offsets are absolute in the concatenation of every chunk's ``text``. A
    tail that may still become a citation (``【3†L1``) is held back until the
    next delta completes or breaks it, or until :meth:`finish`.

    >>> from harmonia.tools.browser import Page
    >>> stream = CitationStream(BrowserState([Page("https://example.org/a", "A", "x")]))
    >>> stream.feed("Yes【0†").text
    'Yes'
    >>> chunk = stream.feed("L4】!")
    >>> chunk.text, chunk.citations[0].start_index
    (' ([example.org](https://example.org/a)) !', 3)
    >>> stream.finish().text
    ''
    """

    def __init__(self, state: BrowserState, *, style: CitationStyle = "markdown") -> None:
        self._state = state
        self._style: CitationStyle = style
        self._pending = ""
        self._emitted = 0

    @property
    def has_partial(self) -> bool:
        """Whether a possible citation is being held back."""
        return bool(self._pending)

    def _release(self, text: str) -> CitationChunk:
        out, citations = _convert(text, self._state, self._style, self._emitted)
        self._emitted += len(out)
        return CitationChunk(out, citations)

    def feed(self, delta: str) -> CitationChunk:
        """Add a delta; return the converted text that is now final."""
        buffer = self._pending + delta
        partial = _PARTIAL.search(buffer)
        cut = partial.start() if partial else len(buffer)
        self._pending = buffer[cut:]
        return self._release(buffer[:cut])

    def finish(self) -> CitationChunk:
        """End of stream: release what was held back (an unfinished citation stays as text)."""
        rest, self._pending = self._pending, ""
        return self._release(rest)
