"""Page conversion does linear work: a hostile page of many links cannot stall the server.

Rewriting links one by one appends each marker to its parent's text, copying
that text again for every sibling (quadratic: 16k links took 43 s). These
tests compare the one-pass rewrite with the one-by-one rule it replaces, and
convert pages of sizes that would take minutes if the work were quadratic.
"""

from __future__ import annotations

import random
import re
from typing import Any
from urllib.parse import urljoin

import pytest

from harmonia.tools.browser import html_to_page, markdown_to_page
from harmonia.tools.browser._page import LinkTable, get_domain, rewrite_url

# -- the one-pass rewrite equals the one-by-one rule ------------------------


def _one_by_one(root: Any) -> None:
    # The rule the one-pass rewrite must equal: replace each node in turn,
    # appending its text and tail to the text before it.
    def replace(node: Any, text: str) -> None:
        parent, previous, tail = node.getparent(), node.getprevious(), node.tail or ""
        if previous is None:
            parent.text = (parent.text or "") + text + tail
        else:
            previous.tail = (previous.tail or "") + text + tail
        parent.remove(node)

    for i, node in enumerate(list(root.iterfind(".//a[@href]"))):
        replace(node, f"<{i}:{node.get('href')}>")
    for i, node in enumerate(list(root.iterfind(".//img"))):
        replace(node, f"[{i}]")


def _random_html(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(0, 5)):
        kind = rng.random()
        if kind < 0.3:
            parts.append(rng.choice(["x", " y ", "", "z\n", "a &amp; b", "<br>"]))
        elif kind < 0.5 and depth < 4:
            inner = _random_html(rng, depth + 1)
            parts.append(f"<a href='h{rng.randint(0, 9)}'>{inner}</a>")
        elif kind < 0.6:
            parts.append("<img alt='i'>")
        elif kind < 0.7:
            parts.append("<!-- c -->")
        elif depth < 4:
            tag = rng.choice(["p", "div", "span", "b"])
            parts.append(f"<{tag}>{_random_html(rng, depth + 1)}</{tag}>")
    return "".join(parts)


def test_one_pass_rewrite_equals_one_by_one_on_random_trees() -> None:
    lxml_html = pytest.importorskip("lxml.html", reason="HTML trees need lxml")
    from lxml import etree

    from harmonia.tools.browser._html import _replace_all_with_text

    rng = random.Random(7)
    for _ in range(1500):
        html = f"<html><body>{_random_html(rng)}</body></html>"
        expected, got = lxml_html.fromstring(html), lxml_html.fromstring(html)
        _one_by_one(expected)
        links = list(got.iterfind(".//a[@href]"))
        _replace_all_with_text(got, [(a, f"<{i}:{a.get('href')}>") for i, a in enumerate(links)])
        images = list(got.iterfind(".//img"))
        _replace_all_with_text(got, [(img, f"[{i}]") for i, img in enumerate(images)])
        assert etree.tostring(got) == etree.tostring(expected), html


# -- quick URL joining equals urljoin -------------------------------------


def test_link_table_joins_as_urljoin() -> None:
    rng = random.Random(3)
    alphabet = "aZ09/.?#;:@%-_~!$&'()*+,= \t[]"
    starts = ["", "/", "//", "http://", "https://", "HTTP://", "https://h.com", "./", "../"]
    starts += ["/./", "/../", "/a/./b", "?", "#", "http://h.com:8/"]
    bases = ["https://e.org/a/b", "http://E.org:80/x/", "HTTPS://e.org", "file:///tmp/a.md", ""]
    bases += ["https://u@e.org/a", "https://e.org/a?q#f"]
    for _ in range(30_000):
        href = rng.choice(starts) + "".join(rng.choices(alphabet, k=rng.randint(0, 8)))
        base = rng.choice(bases)
        try:
            expected = urljoin(base, href)
        except ValueError:  # a link urljoin cannot join is not followable
            assert LinkTable(base)._resolve(href) is None, (base, href)
            continue
        # A page's link table resolves the same URL and domain, quick shapes included.
        domain = get_domain(expected)
        followable = bool(domain) or expected.startswith("file:")
        want = (rewrite_url(expected), domain) if followable else None
        assert LinkTable(base)._resolve(href) == want, (base, href)


# -- sizes that would take minutes if quadratic ------------------------------


def test_a_paragraph_of_50k_links_converts() -> None:
    # One by one this took about 7 minutes (43 s at 16k, growing with the square).
    pytest.importorskip("lxml", reason="HTML pages need the browser extra (lxml)")
    n = 50_000
    links = "".join(f"<a href='/p{i}'>link {i}</a> " for i in range(n))
    page = html_to_page(f"<html><body><p>{links}</p></body></html>", "https://e.org/")
    assert len(page.links) == n
    assert page.links[n - 1] == f"https://e.org/p{n - 1}"
    assert page.text.endswith(f"【{n - 1}†link {n - 1}】")


def test_html_tags_inside_a_comment_are_spaced_in_linear_work() -> None:
    pytest.importorskip("lxml", reason="HTML pages need the browser extra (lxml)")
    # "a<" repeated inside a comment made the tag-spacing pattern rescan to the
    # comment's end from every "<" (40k: minutes).
    html = "<p>x<!--" + "a<" * 200_000 + "-->y <sup>2</sup></p>"
    assert html_to_page(html, "https://e.org/").text == "x y ^{2}"


def test_markdown_of_unclosed_link_starts_converts_in_linear_work() -> None:
    # "[x](a" repeated: every "[" made the link pattern scan to the line's end.
    text = "[x](a" * 100_000
    assert markdown_to_page(text, "https://e.org/").text == text


def test_tag_spacing_equals_the_reference_pattern() -> None:
    from harmonia.tools.browser._html import _space_tag_runs, _sub_sup

    reference = re.compile(r"(?<=\w)((<[^>]*>)+)(?=\w)")
    sup = re.compile(r"<sup( [^>]*)?>([\w\-]+)</sup>")
    sub = re.compile(r"<sub( [^>]*)?>([\w\-]+)</sub>")
    rng = random.Random(5)
    pieces = ["a", "b", " ", "<", ">", "<b>", "</b>", "<!--", "-->", "-", "é", "<sup>", "</sup>"]
    pieces += ["<sup x>", "<sub>", "</sub>", "\n", "<sup "]
    for _ in range(20_000):
        html = "".join(rng.choices(pieces, k=rng.randint(0, 14)))
        assert _space_tag_runs(html) == reference.sub(r" \1", html), html
        expected = sub.sub(r"_{\2}", sup.sub(r"^{\2}", html))
        assert _sub_sup(html) == expected, html
