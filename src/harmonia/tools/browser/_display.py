"""What the model sees of a page: wrapped, numbered lines in a viewport.

The rules are gpt-oss's: the text is wrapped at 80 columns keeping
whitespace, each line is numbered ``L{n}: ``, and without ``num_lines`` the
viewport holds as many lines as fit in a budget of o200k tokens (the line
that crosses the budget is shown whole).
"""

from __future__ import annotations

import functools
import itertools
import textwrap
from collections.abc import Callable, Sequence
from urllib.parse import unquote

from ._page import Page

WRAP_WIDTH = 80
VIEW_TOKENS = 1024
# The longest o200k token decodes to 128 characters: no more text than this can
# hold the first ``budget + 1`` tokens, so the rest is never tokenized.
_MAX_CHARS_PER_TOKEN = 128
_MAX_URL_CHARS = 1024
MAX_ECHO_CHARS = 1024
"""The most characters of a query, pattern, title or URL a reply repeats (the
reference cuts URLs and errors at this length, with ``...``)."""


def shorten(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last three ``...`` when cut.

    >>> shorten("x" * 2000)[-5:], len(shorten("x" * 2000))
    ('xx...', 1024)
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def wrap_lines(text: str, width: int = WRAP_WIDTH) -> list[str]:
    """Wrap each line at ``width`` columns, keeping whitespace and empty lines.

    >>> [len(line) for line in wrap_lines("a\\n\\n" + "word " * 20)]
    [1, 0, 80, 20]
    """
    return list(
        itertools.chain.from_iterable(
            textwrap.wrap(line, width=width, replace_whitespace=False, drop_whitespace=False)
            if line
            else [""]
            for line in text.split("\n")
        )
    )


def number_lines(lines: Sequence[str], first: int) -> str:
    """``L{n}: `` before each line, counting from ``first``."""
    return "\n".join(f"L{first + i}: {line}" for i, line in enumerate(lines))


@functools.cache
def _encoder() -> tuple[Callable[[str], list[int]], Callable[[list[int]], bytes]]:
    from harmonia import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    return enc.encode_ordinary, enc.decode_bytes


@functools.lru_cache(maxsize=1 << 16)
def _token_chars(token: int) -> int:
    # Characters one token decodes to on its own (a split UTF-8 sequence counts
    # as its replacement characters), the unit gpt-oss measures offsets in.
    return len(_encoder()[1]([token]).decode("utf-8", "replace"))


def view_end(lines: Sequence[str], start: int, num_lines: int, view_tokens: int) -> int:
    """One past the last line shown from ``start``.

    ``num_lines > 0`` shows that many lines; otherwise lines are added while the
    numbered text stays within ``view_tokens`` tokens, the crossing line included.
    """
    total = len(lines)
    if num_lines <= 0:
        numbered = number_lines(lines[start:], start)
        num_lines = total
        # Every token is at least one character: short text fits without counting.
        if len(numbered) > view_tokens:
            encode, _ = _encoder()
            tokens = encode(numbered[: (view_tokens + 1) * _MAX_CHARS_PER_TOKEN])
            if len(tokens) > view_tokens:
                end_char = sum(_token_chars(t) for t in tokens[:view_tokens])
                num_lines = numbered[:end_char].count("\n") + 1
    return min(start + num_lines, total)


def header_url(url: str) -> str:
    """The URL as the header shows it: percent-decoded, long ones cut at 1024 characters."""
    return shorten(unquote(url), _MAX_URL_CHARS)


def render_view(page: Page, cursor: int, lines: Sequence[str], start: int, end: int) -> str:
    """The browsing display: header, scrollbar, then the numbered lines ``start..end-1``.

    >>> p = Page("https://example.org/", "Home", "one\\ntwo\\nthree")
    >>> print(render_view(p, 2, wrap_lines(p.text), 1, 3))
    [2] Home (https://example.org/)
    **viewing lines [1 - 2] of 2**
    <BLANKLINE>
    L1: two
    L2: three
    """
    shown = header_url(page.url)
    # A page's title is the page's to choose: a hostile one cannot fill the reply.
    header = f"[{cursor}] {shorten(page.title)}" + (f" ({shown})" if shown else "")
    scrollbar = f"**viewing lines [{start} - {end - 1}] of {len(lines) - 1}**"
    return f"{header}\n{scrollbar}\n\n{number_lines(lines[start:end], start)}"
