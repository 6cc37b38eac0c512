"""An offline corpus: a folder of Markdown, text and HTML indexed in SQLite FTS5.

Only the standard library is needed (``sqlite3`` with FTS5, compiled into the
python.org and Debian builds; without it a pure-Python BM25 takes over); HTML
files need the ``browser`` extra. Pages are converted once at indexing time
and stored with their links, so ``open`` is a lookup. Ranking is BM25 with the
title weighted; the model's query never reaches FTS5's query syntax (each word
is quoted), so no query can raise. Database work runs in a worker thread, one
operation at a time, so the event loop is never blocked by a large re-index.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urldefrag, urlsplit

from harmonia import InputError, ToolError

from .._markdown import MARKDOWN_SUFFIXES, markdown_to_page, text_to_page
from .._page import Page, SearchResult
from ._base import VIEW_SOURCE_PREFIX
from ._bm25 import PythonBM25, segment

TEXT_SUFFIXES = frozenset({".txt", ".text", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
TITLE_WEIGHT = 5.0
_SNIPPET_TOKENS = 24
_WORD = re.compile(r"\w+")
_MARKUP = re.compile(r"【\d+†([^†】]*)(?:†[^†】]*)?】")
_HEADING_MARK = re.compile(r"^[ \t]*#{1,6}[ \t]+", re.MULTILINE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pages(
    id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, links TEXT NOT NULL);
"""
_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(
    title, body, content='pages', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2');
"""
_FTS_INSERT = "INSERT INTO docs(rowid, title, body) VALUES (?, ?, ?)"


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What one :meth:`LocalCorpusBackend.index` pass did."""

    added: int
    updated: int
    removed: int
    unchanged: int


def fts5_available() -> bool:
    """Whether this Python's SQLite was built with FTS5."""
    with sqlite3.connect(":memory:") as db:
        options = {row[0] for row in db.execute("PRAGMA compile_options")}
    return "ENABLE_FTS5" in options


def fts_query(text: str) -> str:
    """The model's query as an FTS5 query: its words, each quoted, joined by OR.

    >>> fts_query('harbour "bridge" AND NEAR(x*')
    '"harbour" OR "bridge" OR "AND" OR "NEAR" OR "x"'
    >>> fts_query("港口 history")
    '"港 口" OR "history"'
    """
    return " OR ".join(f'"{" ".join(segment(w).split())}"' for w in _WORD.findall(text))


def _summary(snippet: str) -> str:
    # A results line is one line of prose: no link markup, heading marks or newlines.
    return " ".join(_HEADING_MARK.sub("", _MARKUP.sub(r"\1", snippet)).split())


class LocalCorpusBackend:
    """Search and open the files under ``root`` (docs/browser.md, "LocalCorpusBackend").

    A file's URL is ``base_url`` plus its relative path; ``database`` keeps the
    index between runs; ``fts5`` chooses SQLite FTS5 (``None``: where this Python
    has it) or the pure-Python BM25. The index is built on first use and
    refreshed by :meth:`index`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        database: str | os.PathLike[str] = ":memory:",
        base_url: str | None = None,
        source: str = "local",
        fts5: bool | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise InputError(f"corpus root {str(self.root)!r} is not a directory")
        if fts5 is None:
            fts5 = fts5_available()
        elif fts5 and not fts5_available():
            raise InputError(
                "this Python's sqlite3 lacks FTS5 (PRAGMA compile_options has no ENABLE_FTS5); "
                "pass fts5=None to fall back to the pure-Python ranking"
            )
        self.fts5 = fts5
        self.base_url = base_url if base_url is not None else self.root.as_uri() + "/"
        if not self.base_url.endswith("/"):
            self.base_url += "/"
        self._source = source
        # One connection shared with worker threads, serialised by the lock.
        self._db = sqlite3.connect(os.fspath(database), check_same_thread=False)
        self._lock = threading.Lock()
        self._db.executescript(_SCHEMA)
        self._open_fts_table()
        self._indexed = False
        self._fallback: PythonBM25 | None = None

    def __repr__(self) -> str:
        return f"LocalCorpusBackend(root={str(self.root)!r}, base_url={self.base_url!r})"

    @property
    def source(self) -> str:
        """The ``sources=`` value of the tool declaration."""
        return self._source

    # -- indexing ---------------------------------------------------------

    def _files(self) -> dict[str, os.stat_result]:
        suffixes = MARKDOWN_SUFFIXES | TEXT_SUFFIXES | HTML_SUFFIXES
        found: dict[str, os.stat_result] = {}
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.startswith(".") or Path(name).suffix.lower() not in suffixes:
                    continue
                path = Path(folder, name)
                found[path.relative_to(self.root).as_posix()] = path.stat()
        return found

    def url_of(self, relpath: str) -> str:
        """The URL of the corpus file at ``relpath`` (POSIX, relative to the root)."""
        return self.base_url + quote(relpath)

    def _convert(self, relpath: str, raw: str) -> Page:
        url = self.url_of(relpath)
        suffix = Path(relpath).suffix.lower()
        if suffix in HTML_SUFFIXES:
            from .._html import html_to_page

            return html_to_page(raw, url)
        if suffix in MARKDOWN_SUFFIXES:
            return markdown_to_page(raw, url)
        return text_to_page(raw, url)

    def index(self) -> IndexStats:
        """Bring the index up to date with the folder (by modification time and size)."""
        with self._lock:
            return self._index()

    def _index(self) -> IndexStats:
        db = self._db
        known = {
            row[0]: (row[1], row[2], row[3])
            for row in db.execute("SELECT path, mtime_ns, size, id FROM pages")
        }
        files = self._files()
        added = updated = unchanged = 0
        with db:
            for relpath in known.keys() - files.keys():
                self._delete(known[relpath][2])
            for relpath, st in sorted(files.items()):
                old = known.get(relpath)
                if old is not None and old[0] == st.st_mtime_ns and old[1] == st.st_size:
                    unchanged += 1
                    continue
                raw = (self.root / relpath).read_text(encoding="utf-8", errors="replace")
                page = self._convert(relpath, raw)
                if old is not None:
                    self._delete(old[2])
                    updated += 1
                else:
                    added += 1
                links = json.dumps({str(k): v for k, v in page.links.items()})
                cur = db.execute(
                    "INSERT INTO pages(path, mtime_ns, size, title, body, links) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (relpath, st.st_mtime_ns, st.st_size, page.title, page.text, links),
                )
                if self.fts5:
                    db.execute(
                        _FTS_INSERT, (cur.lastrowid, segment(page.title), segment(page.text))
                    )
        self._indexed = True
        self._fallback = None
        return IndexStats(added, updated, len(known.keys() - files.keys()), unchanged)

    def _open_fts_table(self) -> None:
        # A database last written without FTS5 has no up-to-date FTS table: the
        # fallback drops it, and FTS5 mode rebuilds it from the stored pages.
        db = self._db
        with db:
            if not self.fts5:
                db.execute("DROP TABLE IF EXISTS docs")
                return
            found = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'docs'").fetchone()
            db.executescript(_FTS_SCHEMA)
            if found is None:
                for rowid, title, body in db.execute("SELECT id, title, body FROM pages"):
                    db.execute(_FTS_INSERT, (rowid, segment(title), segment(body)))

    def _delete(self, rowid: int) -> None:
        if self.fts5:
            # External-content FTS5 tables are told what to forget, with the old values.
            title, body = self._db.execute(
                "SELECT title, body FROM pages WHERE id = ?", (rowid,)
            ).fetchone()
            self._db.execute(
                "INSERT INTO docs(docs, rowid, title, body) VALUES ('delete', ?, ?, ?)",
                (rowid, segment(title), segment(body)),
            )
        self._db.execute("DELETE FROM pages WHERE id = ?", (rowid,))

    def _ensure_indexed(self) -> None:
        if not self._indexed:
            self._index()

    # -- the Backend protocol ---------------------------------------------

    def search_sync(self, query: str, topn: int) -> list[SearchResult]:
        """:meth:`search` without the event loop."""
        with self._lock:
            self._ensure_indexed()
            if not self.fts5:
                return self._search_fallback(query, topn)
            return self._search_fts5(query, topn)

    def _search_fallback(self, query: str, topn: int) -> list[SearchResult]:
        if self._fallback is None:
            rows = self._db.execute("SELECT path, title, body FROM pages ORDER BY path")
            self._fallback = PythonBM25(rows, TITLE_WEIGHT)
        titles = dict(self._db.execute("SELECT path, title FROM pages"))
        return [
            SearchResult(self.url_of(path), titles[path], _summary(snippet))
            for path, snippet in self._fallback.search(query, topn)
        ]

    def _search_fts5(self, query: str, topn: int) -> list[SearchResult]:
        match = fts_query(query)
        if not match:
            return []
        rows = self._db.execute(
            "SELECT pages.path, pages.title, "
            f"snippet(docs, 1, '', '', '…', {_SNIPPET_TOKENS}) "
            "FROM docs JOIN pages ON pages.id = docs.rowid "
            f"WHERE docs MATCH ? ORDER BY bm25(docs, {TITLE_WEIGHT}, 1.0), pages.path LIMIT ?",
            (match, max(0, topn)),
        ).fetchall()
        return [
            SearchResult(self.url_of(path), title, _summary(snip)) for path, title, snip in rows
        ]

    async def search(self, query: str, topn: int) -> list[SearchResult]:
        """The best ``topn`` files for ``query``, with titles and snippets."""
        return await asyncio.to_thread(self.search_sync, query, topn)

    def _relpath(self, url: str) -> str | None:
        url = urldefrag(url).url
        if not url.startswith(self.base_url):
            return None
        return unquote(urlsplit(url[len(self.base_url) :]).path)

    def fetch_sync(self, url: str) -> Page:
        """:meth:`fetch` without the event loop."""
        with self._lock:
            self._ensure_indexed()
            view_source = url.startswith(VIEW_SOURCE_PREFIX)
            if view_source:
                url = url[len(VIEW_SOURCE_PREFIX) :]
            relpath = self._relpath(url)
            row = None
            if relpath is not None:
                row = self._db.execute(
                    "SELECT title, body, links FROM pages WHERE path = ?", (relpath,)
                ).fetchone()
            if relpath is None or row is None:
                raise ToolError(
                    f"`{url}` is not in the local corpus; open a search result or a link "
                    f"of a corpus page (corpus URLs start with {self.base_url})."
                )
            title, body, links = row
            url = self.url_of(relpath)  # canonical: no fragment or query
            if view_source:
                raw = (self.root / relpath).read_text(encoding="utf-8", errors="replace")
                return text_to_page(raw, VIEW_SOURCE_PREFIX + url, title)
            return Page(url, title, body, {int(k): v for k, v in json.loads(links).items()})

    async def fetch(self, url: str) -> Page:
        """The stored page of the corpus file at ``url`` (``view-source:`` for its source)."""
        return await asyncio.to_thread(self.fetch_sync, url)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    async def aclose(self) -> None:
        """Close the database."""
        self.close()
