"""LocalCorpusBackend: FTS5 ranking, hostile queries, incremental re-index, links, the tool."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from harmonia import InputError, ToolError
from harmonia.tools.browser import BrowserTool, LocalCorpusBackend, fts5_available

pytestmark = pytest.mark.skipif(not fts5_available(), reason="this sqlite3 lacks FTS5")

FILES = {
    # The title holds the term once: with the title weighted it outranks bodies.
    "lighthouse.md": "# Lighthouse keeping\n\nA short note on the keepers' duties at night.",
    "coast.md": (
        "# Coast walks\n\nThe walk passes a lighthouse and, later, a second lighthouse, "
        "before the path turns inland towards the [lighthouse notes](lighthouse.md#duties)."
    ),
    "sub/bridges.txt": "Bridges\n\nSuspension bridges hang their deck from cables. Café.",
    "notes/.hidden.md": "# Lighthouse secret\n\nnever indexed",
    "cjk.md": "# 港口\n\n桥梁与港口的历史。灯塔守护者。",
    "image.png": "not text",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    _write(root, FILES)
    return root


def _search(backend: LocalCorpusBackend, query: str, topn: int = 10) -> list[str]:
    return [r.url.rsplit("/", 1)[-1] for r in asyncio.run(backend.search(query, topn))]


def test_ranking_weights_the_title(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus)
    assert _search(backend, "lighthouse") == ["lighthouse.md", "coast.md"]
    assert _search(backend, "lighthouse", topn=1) == ["lighthouse.md"]
    assert _search(backend, "bridge") == ["bridges.txt"]  # porter stemming
    assert _search(backend, "灯塔") == ["cjk.md"]  # a word inside a run of Han characters
    assert _search(backend, "塔灯") == []  # the characters in order, not any of them
    assert _search(backend, "cafe") == ["bridges.txt"]  # diacritics folded


def test_results_carry_titles_urls_and_snippets(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus)
    [result] = asyncio.run(backend.search("suspension", 5))
    assert result.url == (corpus / "sub" / "bridges.txt").as_uri()
    assert result.title == "bridges"  # a text file is titled by its name
    assert "Suspension bridges hang their deck" in result.summary
    [coast] = [r for r in asyncio.run(backend.search("inland", 5))]
    assert "lighthouse notes" in coast.summary and "【" not in coast.summary


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '"unbalanced',
        "AND",
        "lighthouse AND",
        "NEAR(",
        "NEAR(a b",
        "a*b:c",
        "*",
        "-x",
        "title:lighthouse",
        "桥梁与港口",
        "^",
        "()",
        "",
        "   ",
        "'; DROP TABLE pages; --",
        "\x00",
        "😀",
        "a" * 5000,
    ],
)
def test_hostile_queries_never_raise(corpus: Path, query: str) -> None:
    backend = LocalCorpusBackend(corpus)
    results = asyncio.run(backend.search(query, 5))
    assert len(results) <= 5
    assert _search(backend, "lighthouse") == ["lighthouse.md", "coast.md"]  # still intact


def test_operators_are_searched_as_words(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus)
    assert _search(backend, "lighthouse OR NOT zzz") == ["lighthouse.md", "coast.md"]
    assert _search(backend, "AND") == ["coast.md"]  # the word "and" of its body


def test_incremental_reindex_by_modification_time(corpus: Path, tmp_path: Path) -> None:
    database = tmp_path / "index.sqlite"
    backend = LocalCorpusBackend(corpus, database=database)
    first = backend.index()
    assert (first.added, first.updated, first.removed, first.unchanged) == (4, 0, 0, 0)
    assert backend.index().unchanged == 4
    path = corpus / "sub" / "bridges.txt"
    path.write_text("Bridges\n\nNow about ferries instead.", encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    (corpus / "coast.md").unlink()
    _write(corpus, {"new.md": "# Ferries\n\nA ferry crosses."})
    stats = backend.index()
    assert (stats.added, stats.updated, stats.removed, stats.unchanged) == (1, 1, 1, 2)
    assert _search(backend, "ferry") == ["new.md", "bridges.txt"]
    assert _search(backend, "suspension") == []
    assert _search(backend, "inland") == []
    backend.close()
    reopened = LocalCorpusBackend(corpus, database=database)  # the index persists
    assert reopened.index().unchanged == 4


def test_links_between_corpus_files_are_followable(corpus: Path, run: Any) -> None:
    tool = BrowserTool(LocalCorpusBackend(corpus))
    out = run(tool, "search", query="inland")
    assert "【0†Coast walks】" in out.text  # file: URLs share the empty domain
    page = run(tool, "open", id=0)
    assert "【0†lighthouse notes】" in page.text
    opened = run(tool, "open", id=0)
    assert opened.metadata["title"] == "Lighthouse keeping"
    assert opened.metadata["url"] == (corpus / "lighthouse.md").as_uri()


def test_open_by_url_view_source_and_unknown_urls(corpus: Path, run: Any) -> None:
    backend = LocalCorpusBackend(corpus, base_url="https://docs.example/")
    tool = BrowserTool(backend, view_tokens=50)
    url = "https://docs.example/coast.md"
    assert run(tool, "open", id=url).text.startswith(f"[0] Coast walks ({url})")
    raw = run(tool, "open", id=url, view_source=True)
    assert "[lighthouse notes](lighthouse.md#duties)" in raw.text
    with pytest.raises(ToolError, match="not in the local corpus"):
        asyncio.run(tool.open("https://docs.example/../../etc/passwd"))
    with pytest.raises(ToolError, match="not in the local corpus"):
        asyncio.run(tool.open("https://docs.example/notes/.hidden.md"))


def test_html_files_are_converted(corpus: Path) -> None:
    pytest.importorskip("lxml", reason="HTML corpus files need the browser extra (lxml)")
    _write(corpus, {"page.html": "<title>Harbour</title><p>A <a href='coast.md'>walk</a></p>"})
    backend = LocalCorpusBackend(corpus)
    page = asyncio.run(backend.fetch(backend.url_of("page.html")))
    assert (page.title, page.text) == ("Harbour", "A 【0†walk】")
    assert page.links[0] == backend.url_of("coast.md")


def test_is_a_backend(corpus: Path) -> None:
    from harmonia.tools.browser import Backend

    assert isinstance(LocalCorpusBackend(corpus), Backend)


def test_bad_root_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        LocalCorpusBackend(tmp_path / "missing")


# -- the pure-Python ranking used when sqlite3 has no FTS5 ----------------------


def test_fallback_ranking_matches_fts5_without_stemming(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus, fts5=False)
    assert backend.fts5 is False
    assert _search(backend, "lighthouse") == ["lighthouse.md", "coast.md"]
    assert _search(backend, "lighthouse", topn=1) == ["lighthouse.md"]
    assert _search(backend, "CAFE") == ["bridges.txt"]  # case and diacritics folded
    assert _search(backend, "灯塔") == ["cjk.md"]
    assert _search(backend, "bridge") == []  # no stemming in the fallback
    [result] = asyncio.run(backend.search("suspension", 3))
    assert result.title == "bridges" and "Suspension bridges hang" in result.summary


@pytest.mark.parametrize("query", ['"', "NEAR(", "a*b:c", "桥梁与港口", "", "\x00", "x" * 5000])
def test_fallback_hostile_queries_never_raise(corpus: Path, query: str) -> None:
    assert len(asyncio.run(LocalCorpusBackend(corpus, fts5=False).search(query, 5))) <= 5


def test_fallback_follows_reindex(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus, fts5=False)
    assert _search(backend, "ferry") == []
    _write(corpus, {"new.md": "# Ferries\n\nA ferry crosses."})
    backend.index()
    assert _search(backend, "ferry") == ["new.md"]


def test_backend_serves_calls_from_worker_threads(corpus: Path) -> None:
    backend = LocalCorpusBackend(corpus)

    async def many() -> list[Any]:
        return await asyncio.gather(*(backend.search("lighthouse", 2) for _ in range(8)))

    assert all(len(r) == 2 for r in asyncio.run(many()))


def test_database_moves_between_fts5_and_fallback(corpus: Path, tmp_path: Path) -> None:
    database = tmp_path / "index.sqlite"
    LocalCorpusBackend(corpus, database=database).index()
    fallback = LocalCorpusBackend(corpus, database=database, fts5=False)
    _write(corpus, {"new.md": "# Ferries\n\nA ferry crosses."})
    assert fallback.index().added == 1
    fallback.close()
    again = LocalCorpusBackend(corpus, database=database, fts5=True)
    assert again.index().unchanged == 5
    assert _search(again, "ferry") == ["new.md"]  # the FTS table was rebuilt
    assert _search(again, "lighthouse") == ["lighthouse.md", "coast.md"]
