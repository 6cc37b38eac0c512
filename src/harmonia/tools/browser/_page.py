"""The page model every browser display is made from, and the link markup shared by converters.

A :class:`Page` is text the model reads plus the links it can follow: link
``k`` appears in the text as ``【k†anchor】`` (same domain) or
``【k†anchor†domain】`` and ``links[k]`` is its absolute URL. Search and find
results are pages too (``kind`` says which); their ``hit_lines`` remember, per
link, the line to open the target at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlparse

from harmonia import InputError

PageKind = Literal["page", "search", "find"]

_SMP = re.compile("[\U00010000-\U0001ffff]")
# The display reserves 【 】 for links, so the same characters in a source are
# swapped for look-alikes; a zero-width space would make "find" miss words.
_SPECIAL = {"【": "〖", "】": "〗", "◼": "◾", "\u200b": ""}
_SPECIAL_RE = re.compile("|".join(map(re.escape, _SPECIAL)))
_WS = re.compile(r"\s+")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_BLANK_LINE = re.compile(r"^\s+$", flags=re.MULTILINE)
_EXTRA_NEWLINES = re.compile(r"\n(\s*\n)+")
# Hrefs of these shapes join to a base URL without urljoin's general machinery
# (a page of a million links spends most of its time there): an http(s) URL,
# or a path from the root, of characters that parsing leaves as they are, with
# no dot segment to resolve. ``LinkTable`` joins them as ``urljoin`` does (tested).
# A path segment that parsing keeps as it is and joining never resolves (not "." or "..").
_SEGMENT = r"(?!\.\.?(?:[/?]|$))[A-Za-z0-9_~%!$&'()*+,=:@.-]*"
_SAFE_PATH = rf"/(?!/){_SEGMENT}(?:/{_SEGMENT})*"
_SAFE_QUERY = r"(?:\?[A-Za-z0-9_~%!$&'()*+,=:@/?.-]+)?"
_SIMPLE_ABSOLUTE = re.compile(
    r"(?P<scheme>https?)://(?P<netloc>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?::[0-9]+)?)"
    rf"(?:{_SAFE_PATH})?{_SAFE_QUERY}"
)
_SIMPLE_ROOTED = re.compile(_SAFE_PATH + _SAFE_QUERY)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the browser: what a cursor shows.

    >>> page = Page("https://example.org/a", "A", "See 【0†b】.", {0: "https://example.org/b"})
    >>> page.links[0]
    'https://example.org/b'
    """

    url: str
    title: str
    text: str
    links: Mapping[int, str] = field(default_factory=dict)
    kind: PageKind = "page"
    hit_lines: Mapping[int, int] = field(default_factory=dict)
    source_url: str | None = None
    """For a find page, the URL of the page searched (what its citations point at)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (link ids become strings, as JSON keys must)."""
        out: dict[str, Any] = {"url": self.url, "title": self.title, "text": self.text}
        out["links"] = {str(k): v for k, v in self.links.items()}
        if self.kind != "page":
            out["kind"] = self.kind
        if self.hit_lines:
            out["hit_lines"] = {str(k): v for k, v in self.hit_lines.items()}
        if self.source_url is not None:
            out["source_url"] = self.source_url
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Page:
        """Rebuild a page written by :meth:`to_dict`."""
        try:
            kind = raw.get("kind", "page")
            if kind not in ("page", "search", "find"):
                raise InputError(f"page kind must be page, search or find, not {kind!r}")
            return cls(
                url=str(raw["url"]),
                title=str(raw["title"]),
                text=str(raw["text"]),
                links={int(k): str(v) for k, v in raw.get("links", {}).items()},
                kind=kind,
                hit_lines={int(k): int(v) for k, v in raw.get("hit_lines", {}).items()},
                source_url=raw.get("source_url"),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, InputError):
                raise
            raise InputError(f"not a browser page dict ({e!r}); use Page.to_dict() output") from e


def get_domain(url: str) -> str:
    """The host part of ``url`` (``""`` for ``file:`` URLs and the empty URL)."""
    if not _SCHEME.match(url):
        # A bare domain ("example.org") has no scheme; give it one so the host survives.
        url = "http://" + url
    try:
        return urlparse(url).netloc
    except ValueError:
        return ""


def clean_source_text(text: str) -> str:
    """Drop astral-plane characters (emoji) and swap characters the display reserves."""
    return _SPECIAL_RE.sub(lambda m: _SPECIAL[m.group(0)], _SMP.sub("", text))


def merge_whitespace(text: str) -> str:
    """Collapse every run of whitespace (newlines included) into one space."""
    return _WS.sub(" ", text)


def tidy_text(text: str) -> str:
    """Blank out whitespace-only lines and collapse runs of blank lines into one."""
    return _EXTRA_NEWLINES.sub("\n\n", _BLANK_LINE.sub("", text))


def _split_base(url: str) -> tuple[str, str] | None:
    """``(scheme, netloc)`` of an http(s) base URL that rooted paths join to directly."""
    try:
        parts = urlparse(url)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.netloc:
        return parts.scheme, parts.netloc
    return None


def rewrite_url(url: str) -> str:
    """arXiv abstracts are opened on ar5iv, which serves them as HTML."""
    return url.replace("arxiv.org", "ar5iv.org")


class LinkTable:
    """Assigns per-page link ids in order of appearance, one id per target URL."""

    def __init__(self, page_url: str) -> None:
        self.page_url = page_url
        self.domain = get_domain(page_url)
        self.links: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._base = _split_base(page_url)
        self._resolved: dict[str, tuple[str, str] | None] = {}
        self.last_id: int | None = None

    def _resolve(self, href: str) -> tuple[str, str] | None:
        # (target URL, its domain) of an href, or None when it cannot be followed.
        # The two quick shapes (see _SIMPLE_ABSOLUTE) have the netloc as their domain.
        absolute = _SIMPLE_ABSOLUTE.fullmatch(href)
        if absolute is not None:
            return rewrite_url(href), absolute["netloc"]
        if self._base is not None and _SIMPLE_ROOTED.fullmatch(href):
            return rewrite_url(f"{self._base[0]}://{self._base[1]}{href}"), self._base[1]
        try:
            target = urljoin(self.page_url, href)
        except ValueError:
            return None
        domain = get_domain(target)
        if not domain and not target.startswith("file:"):
            return None
        return rewrite_url(target), domain

    def marker(self, href: str, anchor: str) -> str | None:
        """The ``【id†text(†domain)】`` markup for a link, or None to leave the anchor as text.

        ``None`` means the link is not followable (``mailto:``, ``javascript:``,
        a bare ``#fragment``, or a URL without a host that is not a ``file:`` URL).
        """
        if href.startswith(("mailto:", "javascript:", "#")):
            return None
        if href in self._resolved:
            resolved = self._resolved[href]
        else:
            resolved = self._resolved[href] = self._resolve(href)
        if resolved is None:
            return None
        target, domain = resolved
        link_id = self._ids.get(target)
        if link_id is None:
            link_id = self._ids[target] = len(self.links)
            self.links[link_id] = target
        self.last_id = link_id
        text = anchor.replace("†", "‡")
        if domain == self.domain:
            return f"【{link_id}†{text}】"
        return f"【{link_id}†{text}†{domain}】"


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One hit a search backend returns.

    ``line``, when the backend knows it, is the line of the target page the
    hit is about: following the result opens the page near it. ``html`` says
    that ``title`` and ``summary`` are HTML fragments, as web search APIs
    return them: the results page then shows their text (``AT&amp;T <b>x</b>``
    reads ``AT&T x``), built the way gpt-oss builds it (needs the ``browser``
    extra). Otherwise they are plain text.
    """

    url: str
    title: str
    summary: str = ""
    line: int | None = None
    html: bool = False


def results_page(query: str, results: list[SearchResult]) -> Page:
    """The search-results page: one numbered link per result, as gpt-oss shows them.

    gpt-oss renders results through HTML (a ``<ul>`` of links). Results marked
    ``html`` go the same way (:func:`harmonia.tools.browser._html.html_results_page`);
    plain-text results build the same text directly.

    >>> page = results_page("q", [SearchResult("https://example.org/a", "A", "About a.")])
    >>> page.text
    '\\nURL: \\n# Search Results\\n\\n  * 【0†A†example.org】 About a.'
    """
    if any(result.html for result in results):
        from ._html import html_results_page

        return html_results_page(query, results)
    table = LinkTable("")
    items: list[str] = []
    hit_lines: dict[int, int] = {}
    for result in results:
        title = merge_whitespace(clean_source_text(result.title)).strip() or result.url
        marker = table.marker(result.url, title) or title
        summary = merge_whitespace(clean_source_text(result.summary)).strip()
        items.append(f"  * {marker} {summary}".rstrip())
        if result.line is not None and table.last_id is not None and marker != title:
            hit_lines[table.last_id] = result.line
    text = "\nURL: \n# Search Results" + ("\n\n" + "\n".join(items) if items else "")
    return Page("", query, text, dict(table.links), kind="search", hit_lines=hit_lines)
