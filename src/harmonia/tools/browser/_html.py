"""HTML to a :class:`Page`, following the gpt-oss browser's conversion rules.

The conversion uses lxml (to rewrite links, images and math in the tree) and
html2text (to turn the tree into plain text), as gpt-oss does, so pages look
the way the model saw them. Both come with the ``browser`` extra and are
imported on first use.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import html as html_lib
import re
import secrets
from collections.abc import Iterator
from typing import Any

from harmonia import InputError
from harmonia._errors import install_hint

from ._page import (
    LinkTable,
    Page,
    SearchResult,
    clean_source_text,
    get_domain,
    merge_whitespace,
    rewrite_url,
    tidy_text,
)

MAX_RESULT_TITLE_CHARS = 2_000
MAX_RESULT_SUMMARY_CHARS = 20_000
"""What of a search result's title and summary is shown (real ones are far shorter):
a results page is converted in bounded work whatever the search API returns."""

_SUP = re.compile(r"<sup( [^>]*)?>([\w\-]+)</sup>")
_SUB = re.compile(r"<sub( [^>]*)?>([\w\-]+)</sub>")
# A space before tags glued between two word characters (table cells, inline
# blocks) keeps "<td>a</td><td>b</td>" from reading as "ab".
_TAGS_BETWEEN_WORDS = re.compile(r"(?<=\w)((<[^>]*>)+)(?=\w)")
# A "<" inside a tag (only comments and processing instructions hold one once
# lxml has written the tree): the patterns above would rescan from each of them.
_LT_IN_TAG = re.compile(r"<[^>]*<")
_WORD_THEN_LT = re.compile(r"(?<=\w)<")
_WORD = re.compile(r"\w")
_WORD_RUN = re.compile(r"[\w\-]+")
_ONLY_MARKERS = re.compile(r"【\@([^】]+)】")
# lxml refuses a str that declares its own encoding; the text is already decoded.
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")


def _lxml_html() -> Any:
    try:
        import lxml.etree
        import lxml.html
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InputError(f"HTML pages need lxml and html2text: {install_hint('browser')}") from e
    return lxml


def _replace_all_with_text(root: Any, replacements: list[tuple[Any, str]]) -> None:
    """Replace each node (a descendant of ``root``) by a text, keeping what follows it.

    The result equals replacing them one by one in order, each node's text and
    tail appended to the text before it; but that copies the parent's growing
    text once per sibling (quadratic: 16k links took 43 s). Here every node
    becomes an element of a tag no page can guess holding just its text, and
    lxml's ``strip_tags`` dissolves them all in one pass.
    """
    if not replacements:
        return
    mark = f"harmonia-{secrets.token_hex(8)}"
    for node, text in replacements:
        if len(node):
            del node[:]  # its children (and their tails) are what the text replaces
        node.tag = mark
        node.text = text
    _lxml_html().etree.strip_tags(root, mark)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    # Marking holds a proxy object per link; with a million of them the cyclic
    # collector's full passes cost more than the marking (5x at 1M links). The
    # tree work makes no cycles to collect, so the collector waits until it ends.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _mark_links(root: Any, table: LinkTable) -> None:
    # Every decision depends only on the anchor's own subtree, which no earlier
    # replacement touches (document order visits ancestors first), so all are
    # made first and applied together.
    replacements: list[tuple[Any, str]] = []
    # root.iter is ".//a[@href]" walked in C: the root itself is not a descendant.
    for anchor in root.iter("a"):
        href = anchor.get("href")
        if href is None or anchor is root or href.startswith(("mailto:", "javascript:")):
            continue
        raw = " ".join(anchor.itertext()) if len(anchor) else (anchor.text or "")
        text = merge_whitespace(raw).replace("†", "‡")
        if not text or ("【" in text and not _ONLY_MARKERS.sub("", text)):
            continue  # no text: an image link
        if href.startswith("#"):
            replacements.append((anchor, text))
            continue
        marker = table.marker(href, text)
        if marker is not None:
            replacements.append((anchor, marker))
    _replace_all_with_text(root, replacements)


def _mark_images(root: Any) -> None:
    replacements: list[tuple[Any, str]] = []
    for number, img in enumerate(root.iterfind(".//img")):
        name = img.get("alt", img.get("title"))
        replacements.append((img, f"[Image {number}: {name}]" if name else f"[Image {number}]"))
    _replace_all_with_text(root, replacements)


class _Closers:
    """The first ``>`` at or after a position, by bisection over all of them."""

    def __init__(self, text: str) -> None:
        self.positions = [m.start() for m in re.finditer(">", text)]

    def next(self, start: int) -> int:
        i = bisect.bisect_left(self.positions, start)
        return self.positions[i] if i < len(self.positions) else -1


def _sub_tag_word(html: str, tag: str, mark: str) -> str:
    # ``<tag( [^>]*)?>([\w\-]+)</tag>`` -> ``{mark}{\2}``, matched as the regex does.
    opening, closing = f"<{tag}", f"</{tag}>"
    closers = _Closers(html)
    out: list[str] = []
    last = 0
    pos = html.find(opening)
    while pos >= 0:
        after = pos + len(opening)
        body = -1
        if html.startswith(" ", after):
            gt = closers.next(after)
            body = gt + 1 if gt >= 0 else -1
        elif html.startswith(">", after):
            body = after + 1
        word = _WORD_RUN.match(html, body) if body >= 0 else None
        if word is not None and html.startswith(closing, word.end()):
            out += (html[last:pos], mark, "{", word.group(), "}")
            last = word.end() + len(closing)
            pos = html.find(opening, last)
        else:
            pos = html.find(opening, pos + 1)
    out.append(html[last:])
    return "".join(out)


def _sub_sup(html: str) -> str:
    """``<sup>x</sup>`` -> ``^{x}`` and ``<sub>x</sub>`` -> ``_{x}``, the reference's rule.

    In linear work: the reference patterns rescan to the next ``>`` from every
    ``<sup `` start, which a comment full of them turns quadratic.
    """
    if _LT_IN_TAG.search(html) is None:
        return _SUB.sub(r"_{\2}", _SUP.sub(r"^{\2}", html))
    return _sub_tag_word(_sub_tag_word(html, "sup", "^"), "sub", "_")


def _space_tag_runs(html: str) -> str:
    """A space before each run of tags glued between word characters, in linear work.

    Equal to ``_TAGS_BETWEEN_WORDS.sub(r" \1", html)``, whose scan from every
    ``<`` to the next ``>`` is quadratic when one comment holds many "word<".
    """
    if _LT_IN_TAG.search(html) is None:
        return _TAGS_BETWEEN_WORDS.sub(r" \1", html)
    closers = _Closers(html)
    size = len(html)
    chain_end: dict[int, int] = {}  # a "<" -> the end of the run of tags it starts (-1: none)

    def run_from(start: int) -> int:
        path: list[int] = []
        end = start
        while end < size and html[end] == "<" and end not in chain_end:
            gt = closers.next(end + 1)
            if gt < 0:
                break
            path.append(end)
            end = gt + 1
        if end < size and html[end] == "<":
            known = chain_end.get(end, -1)
            end = end if known < 0 else known  # an unclosed "<" ends the run before it
        for position in path:
            chain_end[position] = end
        return chain_end.get(start, -1)

    out: list[str] = []
    last = 0
    for found in _WORD_THEN_LT.finditer(html):
        start = found.start()
        if start < last:
            continue
        end = run_from(start)
        if end > start and _WORD.match(html, end) is not None:
            out += (html[last:start], " ", html[start:end])
            last = end
    out.append(html[last:])
    return "".join(out)


def _to_text(html: str) -> str:
    try:
        import html2text
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InputError(f"HTML pages need lxml and html2text: {install_hint('browser')}") from e
    html = _space_tag_runs(_sub_sup(html))
    converter = html2text.HTML2Text()
    for option in ("ignore_links", "ignore_images", "ignore_tables", "ignore_emphasis"):
        setattr(converter, option, True)
    converter.unicode_snob = True
    converter.body_width = 0  # the browser display wraps, not the converter
    return str(converter.handle(html)).strip()


def html_to_page(html: str, url: str, title: str | None = None, *, show_url: bool = False) -> Page:
    """Convert an HTML document into a page of text with numbered links.

    ``title`` wins over the document's ``<title>``; without either the page is
    titled by its domain. ``show_url`` starts the text with a ``URL: ...`` line,
    as gpt-oss's web backends do. Needs the ``browser`` extra (lxml, html2text)::

        page = html_to_page("<p>See <a href='/b'>b</a></p>", "https://example.org/a")
        page.text   # 'See 【0†b】'
    """
    lxml = _lxml_html()
    html = _XML_DECLARATION.sub("", clean_source_text(html))
    table = LinkTable(url)
    try:
        root = lxml.html.fromstring(html)
    except (lxml.etree.ParserError, ValueError):  # empty or unparsable document
        root = None
    text = ""
    found_title: str | None = None
    if root is not None:
        title_node = root.find(".//title")
        found_title = (title_node.text or "") if title_node is not None else None
        with _no_cyclic_gc():
            _mark_links(root, table)
            _mark_images(root)
        for math in list(root.iterfind(".//math")):
            math.getparent().remove(math)
        text = _to_text(lxml.etree.tostring(root, encoding="UTF-8").decode())
    final_title = title or (found_title if found_title is not None else get_domain(url))
    body = (f"\nURL: {url}\n" if show_url else "") + tidy_text(text)
    return Page(url=url, title=final_title, text=body, links=dict(table.links))


def _fragment(text: str, is_html: bool, limit: int) -> str:
    text = text[:limit]
    return text if is_html else html_lib.escape(text, quote=False)


def html_results_page(query: str, results: list[SearchResult]) -> Page:
    """The results page built as gpt-oss builds it: an HTML list of links, converted.

    Titles and summaries of results marked ``html`` are HTML (their markup and
    entities read as text); others are escaped. Unlike the reference, each URL
    is escaped into its attribute (a quote or ``&name`` in it would change it),
    a result without a title shows its URL, and titles and summaries are cut at
    :data:`MAX_RESULT_TITLE_CHARS` and :data:`MAX_RESULT_SUMMARY_CHARS`.
    """
    items: list[str] = []
    for result in results:
        title = _fragment(result.title, result.html, MAX_RESULT_TITLE_CHARS)
        if not title.strip():
            title = html_lib.escape(result.url, quote=False)
        summary = _fragment(result.summary, result.html, MAX_RESULT_SUMMARY_CHARS)
        href = html_lib.escape(result.url, quote=True)
        items.append(f'<li><a href="{href}">{title}</a> {summary}</li>')
    document = (
        f"\n<html><body>\n<h1>Search Results</h1>\n<ul>\n{''.join(items)}\n</ul>\n</body></html>\n"
    )
    page = html_to_page(document, "", query, show_url=True)
    ids = {url: link_id for link_id, url in page.links.items()}
    hit_lines: dict[int, int] = {}
    for result in results:
        link_id = ids.get(rewrite_url(result.url))
        if result.line is not None and link_id is not None:
            hit_lines.setdefault(link_id, result.line)
    return dataclasses.replace(page, title=query, kind="search", hit_lines=hit_lines)
