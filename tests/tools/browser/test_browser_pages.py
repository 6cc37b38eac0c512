"""Page conversion: link markup, images, special characters, Markdown, serialisation."""

from __future__ import annotations

from pathlib import Path

import pytest

from harmonia import InputError
from harmonia.tools.browser import Page, markdown_to_page, text_to_page
from harmonia.tools.browser._page import get_domain

NOTES = Path(__file__).parent / "fixtures" / "notes.md"


def test_markdown_links_are_numbered_in_order_and_deduplicated() -> None:
    page = markdown_to_page(NOTES.read_text(encoding="utf-8"), "file:///corpus/notes.md")
    assert page.title == "Field notes on bridges"
    assert page.links == {
        0: "file:///corpus/guide/article.html",  # relative, resolved against the page URL
        1: "file:///corpus/towers.md#top",
        2: "https://en.wikipedia.org/wiki/Bridge",
        3: "https://docs.python.org/3/",  # reference-style [text][py]
        4: "https://www.python.org/about/",  # autolink
        5: "https://other.example.com/a",
    }
    text = page.text
    assert "【0†the harbour guide】" in text  # same "domain" (file:): no domain part
    assert "【0†the same guide】" in text  # the same target keeps its id
    assert "【2†Wikipedia's bridge article†en.wikipedia.org】" in text
    assert "【5†Smith ‡ Jones†other.example.com】" in text  # † would break the markup
    assert "〖kept as text〗" in text and "【kept" not in text
    assert "Mail: write, top." in text  # mailto and #fragment links stay as plain text
    assert "[Image 0: A suspension bridge] and [Image 1] are images." in text
    assert "[py]:" not in text  # link definitions are consumed


def test_markdown_code_is_left_alone() -> None:
    page = markdown_to_page(NOTES.read_text(encoding="utf-8"), "file:///corpus/notes.md")
    assert "# code is shown as written: [not a link](x.md)" in page.text
    assert "Inline code `[also not](y.md)` stays too." in page.text
    assert all("x.md" not in url and "y.md" not in url for url in page.links.values())


def test_markdown_title_falls_back_to_file_name() -> None:
    assert markdown_to_page("no heading", "file:///c/my%20notes.md").title == "my notes"
    assert markdown_to_page("x", "file:///c/a.md", title="Given").title == "Given"


def test_text_pages_are_tidied_not_linked() -> None:
    page = text_to_page("a [b](c.md)\n   \n\n\nd\u200be 😀", "file:///c/t.txt")
    assert page.text == "a [b](c.md)\n\nde"  # emoji and zero-width space dropped, stripped
    assert page.links == {}


def test_get_domain() -> None:
    assert get_domain("https://Example.org:8443/x") == "Example.org:8443"
    assert get_domain("example.org") == "example.org"
    assert get_domain("file:///tmp/http-notes.md") == ""  # "http" in a path is not a scheme
    assert get_domain("") == ""


def test_html_link_rules() -> None:
    pytest.importorskip("lxml", reason="HTML conversion needs the browser extra (lxml)")
    from harmonia.tools.browser import html_to_page

    html = (
        "<title>T</title><p><a href='/a'>one</a> <a href='https://x.net/b'>two</a> "
        "<a href='/a'>again</a> <a href='#s'>frag</a> <a href='mailto:m@x'>mail</a> "
        "<a href='https://arxiv.org/abs/1'>paper</a> <a href='/img'><img src='i.png'></a></p>"
    )
    page = html_to_page(html, "https://example.org/dir/page")
    assert page.links == {
        0: "https://example.org/a",
        1: "https://x.net/b",
        2: "https://ar5iv.org/abs/1",
    }
    # The link opens on ar5iv but shows the domain the author wrote, as in gpt-oss.
    assert page.text == (
        "【0†one】 【1†two†x.net】 【0†again】 frag mail 【2†paper†arxiv.org】 [Image 0]"
    )


def test_html_show_url_and_empty_document() -> None:
    pytest.importorskip("lxml", reason="HTML conversion needs the browser extra (lxml)")
    from harmonia.tools.browser import html_to_page

    page = html_to_page("<p>hi</p>", "https://example.org/p", "Title", show_url=True)
    assert page.text == "\nURL: https://example.org/p\nhi"
    assert html_to_page("", "https://example.org/e").text == ""
    xhtml = '<?xml version="1.0" encoding="utf-8"?>\n<html><body><p>x</p></body></html>'
    assert html_to_page(xhtml, "https://example.org/x").text == "x"


def test_page_round_trips_through_a_dict() -> None:
    page = Page("u", "t", "x", {0: "a"}, kind="find", hit_lines={0: 7}, source_url="s")
    assert Page.from_dict(page.to_dict()) == page
    with pytest.raises(InputError, match="Page.to_dict"):
        Page.from_dict({"url": "u"})
    with pytest.raises(InputError, match="kind"):
        Page.from_dict({"url": "u", "title": "t", "text": "", "kind": "weird"})
