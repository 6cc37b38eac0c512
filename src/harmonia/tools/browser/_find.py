"""``find``: a case-insensitive search in one page, whose result is a page of hits.

Each hit is a block ``# 【k†match at L{n}】`` followed by the page's lines
from ``n`` (link markup stripped); following link ``k`` reopens the page a few
lines above line ``n``. Hits never overlap, and there are at most
:data:`MAX_FIND_RESULTS`.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from ._display import MAX_ECHO_CHARS, shorten, wrap_lines
from ._page import Page

MAX_FIND_RESULTS = 50
FIND_LINES = 4
# A link cut by the display's wrapping still reads as its anchor text.
_HEAD_OF_CUT_LINK = re.compile(r"^[^【】]*】")
_TAIL_OF_CUT_LINK = re.compile(r"【\d*(?:†(?P<content>[^†】]*)(?:†[^†】]*)?)?$")
_LINK = re.compile(r"【\d+†(?P<content>[^†】]+)(?:†[^†】]+)?】")


def strip_links(text: str) -> str:
    """Replace ``【k†text(†domain)】`` markup by its anchor text.

    >>> strip_links("see 【3†the docs†python.org】 now")
    'see the docs now'
    """
    text = _HEAD_OF_CUT_LINK.sub("", text)
    text = _TAIL_OF_CUT_LINK.sub(lambda m: m.group("content") or "", text)
    return _LINK.sub(lambda m: m.group("content"), text)


def find_in_page(pattern: str, page: Page) -> Page:
    """The find-results page for ``pattern`` (compared lower-cased) in ``page``.

    >>> hits = find_in_page("Tower", Page("https://example.org/t", "T", "a\\nthe tower\\nb"))
    >>> print(hits.text)
    # 【0†match at L1】
    the tower
    b
    >>> hits.hit_lines[0], hits.links[0]
    (1, 'https://example.org/t')
    """
    needle = pattern.lower()
    lines = strip_links("\n".join(wrap_lines(page.text))).split("\n")
    blocks: list[str] = []
    hit_lines: dict[int, int] = {}
    index = 0
    while index < len(lines) and len(blocks) < MAX_FIND_RESULTS:
        if needle not in lines[index].lower():
            index += 1
            continue
        hit = len(blocks)
        shown = "\n".join(lines[index : index + FIND_LINES])
        blocks.append(f"# 【{hit}†match at L{index}】\n{shown}")
        hit_lines[hit] = index
        index += FIND_LINES
    # The pattern is the model's and the title the page's: echo at most
    # MAX_ECHO_CHARS of each (the header cuts the URL at as many).
    echo = shorten(needle)
    text = "\n\n".join(blocks) if blocks else f"No `find` results for pattern: `{echo}`"
    return Page(
        url=f"{page.url}/find?pattern={quote(shorten(needle, 2 * MAX_ECHO_CHARS))}",
        title=f"Find results for text: `{echo}` in `{shorten(page.title)}`",
        text=text,
        links=dict.fromkeys(hit_lines, page.url),
        kind="find",
        hit_lines=hit_lines,
        source_url=page.url,
    )
