"""Markdown and plain text to a :class:`Page`, with the standard library only.

Markdown is already the shape the browser shows (html2text turns HTML into
Markdown-like text), so the text is kept as written and only links and images
are rewritten into the browser's markup: ``[text](url)`` becomes
``【id†text】`` (``【id†text†domain】`` for another domain), ``![alt](src)``
becomes ``[Image N: alt]``. Code blocks and code spans are left alone.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

from ._page import LinkTable, Page, clean_source_text, merge_whitespace, tidy_text

# ![alt](src "title") / [text](url "title") / <https://autolink>
# No part can run past the start of the next link ("[" in a URL, "(" in a
# parenthesized title), so a line of unclosed "[x](a" is scanned once, not
# once per "[" (quadratic).
_INLINE = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]"
    r"\(\s*<?(?P<url>[^\s)<>\[\]]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
_REF_USE = re.compile(r"(?P<bang>!?)\[(?P<text>[^\[\]]+)\]\[(?P<ref>[^\[\]]*)\]")
_REF_DEF = re.compile(r"^ {0,3}\[(?P<ref>[^\]\n]+)\]:\s*<?(?P<url>\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_AUTOLINK = re.compile(r"<(?P<url>(?:https?|ftp|file)://[^\s<>]+)>")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdown", ".mkd"})


class _Rewriter:
    def __init__(self, url: str, refs: dict[str, str]) -> None:
        self.links = LinkTable(url)
        self.refs = refs
        self.images = 0

    def _image(self, alt: str) -> str:
        text = f"[Image {self.images}: {alt}]" if alt else f"[Image {self.images}]"
        self.images += 1
        return text

    def _link(self, bang: str, text: str, url: str) -> str:
        if bang:
            return self._image(merge_whitespace(text).strip())
        anchor = merge_whitespace(text).strip()
        if not anchor:
            return ""
        marker = self.links.marker(url, anchor)
        return anchor if marker is None else marker

    def line(self, line: str) -> str:
        if "[" not in line and "<" not in line:
            return line  # no link or image can start here: the common case, kept fast
        # Code spans are cut out first so their brackets are never read as links.
        spans = [m.group(0) for m in _CODE_SPAN.finditer(line)]
        out: list[str] = []
        for i, chunk in enumerate(_CODE_SPAN.sub("\0", line).split("\0")):
            chunk = _INLINE.sub(lambda m: self._link(m["bang"], m["text"], m["url"]), chunk)
            chunk = _REF_USE.sub(self._ref, chunk)
            chunk = _AUTOLINK.sub(lambda m: self._link("", m["url"], m["url"]), chunk)
            out.append(chunk)
            if i < len(spans):
                out.append(spans[i])
        return "".join(out)

    def _ref(self, m: re.Match[str]) -> str:
        key = (m["ref"] or m["text"]).strip().lower()
        url = self.refs.get(key)
        if url is None:
            return m.group(0)
        return self._link(m["bang"], m["text"], url)


def _title_from(text: str, url: str) -> str:
    heading = _HEADING.search(text)
    if heading:
        return heading.group(1).strip()
    name = PurePosixPath(unquote(urlparse(url).path)).stem
    return name or url


def markdown_to_page(markdown: str, url: str, title: str | None = None) -> Page:
    """Convert Markdown into a page: links numbered, images named, text kept.

    The title is ``title``, else the first heading, else the file name.

    >>> page = markdown_to_page("# Notes\\n\\nSee [the guide](guide.md).", "file:///docs/a.md")
    >>> page.text
    '# Notes\\n\\nSee 【0†the guide】.'
    >>> page.links[0]
    'file:///docs/guide.md'
    """
    source = clean_source_text(markdown.replace("\r\n", "\n"))
    refs = {m["ref"].strip().lower(): m["url"] for m in _REF_DEF.finditer(source)}
    rewriter = _Rewriter(url, refs)
    lines: list[str] = []
    in_fence = False
    for line in source.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            lines.append(line)
        elif in_fence:
            lines.append(line)
        elif refs and _REF_DEF.fullmatch(line):
            continue  # a link definition is not shown: its links are numbered in place
        else:
            lines.append(rewriter.line(line))
    text = tidy_text("\n".join(lines)).strip()
    return Page(url, title or _title_from(source, url), text, dict(rewriter.links.links))


def text_to_page(text: str, url: str, title: str | None = None) -> Page:
    """A plain-text page: the text as written (tidied), no links.

    >>> text_to_page("hello\\n\\n\\n\\nworld", "file:///notes.txt").text
    'hello\\n\\nworld'
    """
    body = tidy_text(clean_source_text(text.replace("\r\n", "\n"))).strip()
    return Page(url=url, title=title or _title_from("", url), text=body)
