"""Benchmark the browser's local corpus and display (a script, not a test).

Generates N Markdown documents (default 10,000) in a temporary folder, indexes
them into SQLite FTS5, then times searches and opens through BrowserTool:

    PYTHONPATH=src python benchmarks/bench_browser.py [--docs 10000] [--queries 300]

Prints indexing time and database size, search p50/p99, open p50 (fetch plus
the token-budget viewport), a no-change re-index, and HTML conversion time of
a fixture page when the browser extra is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harmonia.tools.browser import BrowserTool, LocalCorpusBackend


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(size * 2)}
    return sorted(words)[:size]


def _generate(root: Path, docs: int, rng: random.Random, vocab: list[str]) -> None:
    # Zipf-like word frequencies, so queries have both common and rare terms.
    cum = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    for i in range(docs):
        folder = root / f"part{i % 50:02d}"
        folder.mkdir(exist_ok=True)
        title = " ".join(rng.choices(vocab, cum_weights=cum, k=4)).capitalize()
        paragraphs = []
        for _ in range(rng.randint(3, 8)):
            words = rng.choices(vocab, cum_weights=cum, k=rng.randint(40, 120))
            paragraphs.append(" ".join(words).capitalize() + ".")
        link = f"[see also](../part{(i + 1) % 50:02d}/doc{i + 1}.md)"
        body = "\n\n".join(paragraphs)
        (folder / f"doc{i}.md").write_text(f"# {title}\n\n{body}\n\n{link}\n", encoding="utf-8")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    vocab = _vocabulary(rng, 20_000)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "corpus")
        root.mkdir()
        t0 = time.perf_counter()
        _generate(root, args.docs, rng, vocab)
        text_mb = sum(p.stat().st_size for p in root.rglob("*.md")) / 1e6
        took = time.perf_counter() - t0
        print(f"generated {args.docs} documents, {text_mb:.1f} MB, in {took:.1f} s")

        database = Path(tmp, "index.sqlite")
        backend = LocalCorpusBackend(root, database=database)
        t0 = time.perf_counter()
        stats = backend.index()
        elapsed = time.perf_counter() - t0
        size_mb = database.stat().st_size / 1e6
        print(f"index: {stats.added} documents in {elapsed:.2f} s, database {size_mb:.1f} MB")
        t0 = time.perf_counter()
        backend.index()
        print(f"re-index, nothing changed: {time.perf_counter() - t0:.3f} s")

        tool = BrowserTool(backend)
        queries = [
            " ".join(rng.sample(vocab[:5000], rng.randint(1, 3))) for _ in range(args.queries)
        ]
        search_ms: list[float] = []
        open_ms: list[float] = []

        async def run() -> None:
            for query in queries:
                t = time.perf_counter()
                out = await tool.search(query, topn=10)
                search_ms.append((time.perf_counter() - t) * 1000)
                if "【0†" in out.text:
                    t = time.perf_counter()
                    await tool.open(0)
                    open_ms.append((time.perf_counter() - t) * 1000)

        asyncio.run(tool.open(backend.url_of("part00/doc0.md")))  # load the tokenizer once
        asyncio.run(run())
        print(
            f"search (topn=10, {len(search_ms)} queries): "
            f"p50 {statistics.median(search_ms):.2f} ms, p99 {_pct(search_ms, 0.99):.2f} ms"
        )
        print(
            f"open (fetch + 1024-token viewport, {len(open_ms)} pages): "
            f"p50 {statistics.median(open_ms):.2f} ms, p99 {_pct(open_ms, 0.99):.2f} ms"
        )
        backend.close()

    fixture = Path(__file__).parent.parent / "tests/tools/browser/fixtures/article.html"
    try:
        from harmonia.tools.browser import html_to_page

        html = fixture.read_text(encoding="utf-8")
        html_to_page(html, "https://example.org/a")
        times = []
        for _ in range(20):
            t = time.perf_counter()
            html_to_page(html, "https://example.org/a")
            times.append((time.perf_counter() - t) * 1000)
        kb = len(html.encode()) / 1000
        print(
            f"HTML to page (lxml + html2text, {kb:.0f} kB): p50 {statistics.median(times):.2f} ms"
        )
    except Exception as e:  # the browser extra is optional for this benchmark
        print(f"HTML conversion skipped: {e}")
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)")


if __name__ == "__main__":
    main()
