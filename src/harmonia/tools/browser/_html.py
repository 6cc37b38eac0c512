"""HTML to a :class:`Page`, following the gpt-oss browser's conversion rules.

The conversion uses lxml (to rewrite links, images and math in the tree) and
html2text (to turn the tree into plain text), as gpt-oss does, so pages look
the way the model saw them. Both come with the ``browser`` extra and are
imported on first use.
"""

from __future__ import annotations

import re
from typing import Any

from harmonia import InputError
from harmonia._errors import install_hint

from ._page import LinkTable, Page, clean_source_text, get_domain, merge_whitespace, tidy_text

_SUP = re.compile(r"<sup( [^>]*)?>([\w\-]+)</sup>")
_SUB = re.compile(r"<sub( [^>]*)?>([\w\-]+)</sub>")
# A space before tags glued between two word characters (table cells, inline
# blocks) keeps "<td>a</td><td>b</td>" from reading as "ab".
_TAGS_BETWEEN_WORDS = re.compile(r"(?<=\w)((<[^>]*>)+)(?=\w)")
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


def _replace_with_text(node: Any, text: str) -> None:
    # Keep the node's tail: it is the text that follows the node in its parent.
    parent = node.getparent()
    previous = node.getprevious()
    tail = node.tail or ""
    if previous is None:
        parent.text = (parent.text or "") + text + tail
    else:
        previous.tail = (previous.tail or "") + text + tail
    parent.remove(node)


def _mark_links(root: Any, table: LinkTable) -> None:
    for anchor in list(root.iterfind(".//a[@href]")):
        href = anchor.attrib["href"]
        if href.startswith(("mailto:", "javascript:")):
            continue
        text = merge_whitespace(" ".join(anchor.itertext())).replace("†", "‡")
        if not _ONLY_MARKERS.sub("", text):  # no text: an image link
            continue
        if href.startswith("#"):
            _replace_with_text(anchor, text)
            continue
        marker = table.marker(href, text)
        if marker is not None:
            _replace_with_text(anchor, marker)


def _mark_images(root: Any) -> None:
    for number, img in enumerate(list(root.iterfind(".//img"))):
        name = img.get("alt", img.get("title"))
        _replace_with_text(img, f"[Image {number}: {name}]" if name else f"[Image {number}]")


def _to_text(html: str) -> str:
    try:
        import html2text
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InputError(f"HTML pages need lxml and html2text: {install_hint('browser')}") from e
    html = _SUP.sub(r"^{\2}", html)
    html = _SUB.sub(r"_{\2}", html)
    html = _TAGS_BETWEEN_WORDS.sub(r" \1", html)
    converter = html2text.HTML2Text()
    converter.ignore_links = True
    converter.ignore_images = True
    converter.ignore_tables = True
    converter.ignore_emphasis = True
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
    if root is None:
        text = ""
        found_title = None
    else:
        title_node = root.find(".//title")
        found_title = (title_node.text or "") if title_node is not None else None
        _mark_links(root, table)
        _mark_images(root)
        for math in list(root.iterfind(".//math")):
            math.getparent().remove(math)
        text = _to_text(lxml.etree.tostring(root, encoding="UTF-8").decode())
    if title:
        final_title = title
    elif found_title is not None:
        final_title = found_title
    else:
        final_title = get_domain(url)
    body = tidy_text(text)
    if show_url:
        body = f"\nURL: {url}\n" + body
    return Page(url=url, title=final_title, text=body, links=dict(table.links))
