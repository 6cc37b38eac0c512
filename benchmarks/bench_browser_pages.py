"""Time page conversion against page size: links, images and hostile shapes (a script).

Each shape is converted at growing sizes; linear work shows as a flat
"µs per unit" column. The shapes are the ones that were quadratic before:
sibling links (``<p><a>..</a> <a>..</a> ...``), "word<" inside a comment (tag
spacing), and Markdown lines of unclosed ``[x](a``. Then the conversion of a
page in a PageConverter worker process, its size refusal and its time budget.

    PYTHONPATH=src python benchmarks/bench_browser_pages.py [--max-links 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable

from harmonia.tools.browser import PageConverter, html_to_page, markdown_to_page


def _links(n: int) -> str:
    return "<html><body><p>" + "".join(f"<a href='/p{i}'>link {i}</a> " for i in range(n)) + "</p>"


def _offsite_links(n: int) -> str:
    body = "".join(
        f'<li><a href="https://s{i % 97}.example/x/{i}?q={i}">r {i}</a></li>' for i in range(n)
    )
    return f"<html><body><ul>{body}</ul>"


def _comment(n: int) -> str:
    return "<p>x<!--" + "a<" * n + "-->y</p>"


def _shapes() -> list[tuple[str, Callable[[int], str], Callable[[str], object]]]:
    return [
        ("sibling links (HTML)", _links, lambda s: html_to_page(s, "https://e.org/")),
        ("off-site links in a list", _offsite_links, lambda s: html_to_page(s, "https://e.org/")),
        ("'a<' in a comment", _comment, lambda s: html_to_page(s, "https://e.org/")),
        (
            "unclosed [x](a (Markdown)",
            lambda n: "[x](a" * n,
            lambda s: markdown_to_page(s, "https://e.org/"),
        ),
        (
            "Markdown links",
            lambda n: "".join(f"[l{i}](/p{i}) " for i in range(n)),
            lambda s: markdown_to_page(s, "https://e.org/"),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-links", type=int, default=1_000_000)
    args = parser.parse_args()
    sizes = [n for n in (2_000, 16_000, 100_000, 1_000_000, 4_000_000) if n <= args.max_links]
    for name, make, convert in _shapes():
        for n in sizes:
            source = make(n)
            t = time.perf_counter()
            convert(source)
            took = time.perf_counter() - t
            print(
                f"{name:28s} n={n:>9,} {len(source) / 1e6:7.1f} MB  {took:7.2f} s  "
                f"{took / n * 1e6:6.2f} µs/unit"
            )

    async def budgets() -> None:
        converter = PageConverter(workers=1, timeout=60)
        html = _links(100_000)
        t = time.perf_counter()
        await converter.html_to_page("<p>warm</p>", "https://e.org/", "", show_url=False)
        print(f"worker start + first tiny page: {time.perf_counter() - t:.2f} s")
        t = time.perf_counter()
        await converter.html_to_page(html, "https://e.org/", "", show_url=False)
        print(f"100k links in the worker process: {time.perf_counter() - t:.2f} s")
        converter.max_chars = 1_000_000
        t = time.perf_counter()
        try:
            await converter.html_to_page(html, "https://e.org/", "", show_url=False)
        except Exception as e:
            print(f"over the size budget, refused in {(time.perf_counter() - t) * 1e3:.2f} ms: {e}")
        converter.timeout = 0.5
        t = time.perf_counter()
        try:
            await converter.run(time.sleep, 3600)
        except Exception as e:
            print(f"stuck conversion stopped after {time.perf_counter() - t:.2f} s: {e}")
        converter.close()

    asyncio.run(budgets())
    print(
        f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
