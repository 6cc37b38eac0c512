"""Citations: 【cursor†La-Lb】 to URL citations, in a final answer and over a stream."""

from __future__ import annotations

import pytest

from harmonia import InputError
from harmonia.tools.browser import (
    BrowserState,
    CitationStream,
    Page,
    convert_citations,
    find_in_page,
    results_page,
)

A = Page("https://example.org/a", "Page A", "alpha\nbeta")
B = Page("https://other.net/b%20c", "Page B", "gamma")


def _state() -> BrowserState:
    # 0: a results page, 1: A, 2: B, 3: find in A
    return BrowserState([results_page("q", []), A, B, find_in_page("beta", A)])


def test_final_answer_citations_become_url_citations() -> None:
    text = "Alpha【1†L0-L1】 and gamma【2†L0】."
    out, cites = convert_citations(text, _state())
    assert out == (
        "Alpha ([example.org](https://example.org/a))  and gamma "
        "([other.net](https://other.net/b%20c)) ."
    )
    assert [(c.url, c.title, c.cursor, c.start_line, c.end_line) for c in cites] == [
        ("https://example.org/a", "Page A", 1, 0, 1),
        ("https://other.net/b%20c", "Page B", 2, 0, 0),
    ]
    for c in cites:  # offsets span exactly the replacement in the new text
        assert out[c.start_index : c.end_index] == f" ([{c.url.split('/')[2]}]({c.url})) "
    assert cites[0].to_annotation() == {
        "type": "url_citation",
        "url": "https://example.org/a",
        "title": "Page A",
        "start_index": 5,
        "end_index": 5 + len(" ([example.org](https://example.org/a)) "),
    }


def test_keep_style_leaves_the_text() -> None:
    text = "x【2†L0】y"
    out, [cite] = convert_citations(text, _state(), style="keep")
    assert out == text
    assert out[cite.start_index : cite.end_index] == "【2†L0】"


def test_unresolvable_citations_are_kept_verbatim() -> None:
    # cursor 9 does not exist; cursor 0 is a results page (no URL); not a line citation
    text = "a【9†L1】 b【0†L2】 c【1†foo】 d【1†L1-】"
    out, cites = convert_citations(text, _state())
    assert (out, cites) == (text, [])


def test_find_page_citations_point_at_the_searched_page() -> None:
    _, [cite] = convert_citations("【3†L0】", _state())
    assert (cite.url, cite.title) == ("https://example.org/a", "Page A")


def test_unknown_style_is_refused() -> None:
    with pytest.raises(InputError, match="style"):
        convert_citations("x", _state(), style="html")  # type: ignore[arg-type]


ANSWER = "See【1†L0-L1】, also【2†L0】 and 【not a citation】 and 【9†L3】 end【1†L1】"


@pytest.mark.parametrize("style", ["markdown", "keep"])
def test_stream_equals_batch_for_every_split(style: str) -> None:
    whole, whole_cites = convert_citations(ANSWER, _state(), style=style)  # type: ignore[arg-type]
    for cut in range(len(ANSWER) + 1):
        for cut2 in range(cut, len(ANSWER) + 1, 7):
            stream = CitationStream(_state(), style=style)  # type: ignore[arg-type]
            chunks = [stream.feed(ANSWER[:cut]), stream.feed(ANSWER[cut:cut2])]
            chunks += [stream.feed(ANSWER[cut2:]), stream.finish()]
            assert "".join(c.text for c in chunks) == whole
            assert [c for ch in chunks for c in ch.citations] == whole_cites


def test_stream_holds_back_a_split_citation_only() -> None:
    stream = CitationStream(_state())
    assert stream.feed("Yes 【1").text == "Yes "
    assert stream.has_partial
    assert stream.feed("†L").text == ""
    chunk = stream.feed("0】 ok")
    assert chunk.text == " ([example.org](https://example.org/a))  ok"
    assert chunk.citations[0].start_index == 4
    assert stream.feed("【x").text == "【x"  # cannot become a citation: released at once
    assert stream.feed(" tail 【2†L").text == " tail "
    assert stream.finish().text == "【2†L"  # unfinished at the end: left as written
    assert not stream.has_partial
