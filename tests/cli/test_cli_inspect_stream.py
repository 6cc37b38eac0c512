"""``harmonia inspect`` on long inputs: bounded memory, streamed output, progress, warnings."""

from __future__ import annotations

import io
import itertools
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import harmonia
from harmonia._cli import inspect as inspect_module
from harmonia._cli import main as main_module
from harmonia._cli import tokens as tokens_module
from harmonia._cli.inspect import BlockDone, TokenView, Totals, walk, write_html
from harmonia._cli.main import main

# Two messages, then junk, an id outside the vocabulary and a stray <|end|>: the
# lenient parser reports a diagnostic for each group of bad tokens.
UNIT = (
    "<|start|>assistant<|channel|>analysis<|message|>Let me think about it.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer is four.<|return|>"
)


def unit_ids(enc: harmonia.HarmonyEncoding, bad: bool) -> list[int]:
    ids = enc.encode(UNIT, allowed_special="all")
    return [*ids, 12345, 999_999, 200007] if bad else ids


def write_ids(path: Path, ids: list[int], repeats: int) -> Path:
    line = " ".join(map(str, ids)) + "\n"
    path.write_text(line * repeats)
    return path


def test_a_fresh_parser_between_messages_changes_nothing(
    enc: harmonia.HarmonyEncoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = [t for n in range(40) for t in unit_ids(enc, bad=n % 3 == 0)] + enc.encode(
        "<|start|>assistant<|message|>cut", allowed_special="all"
    )

    def events() -> list[TokenView | BlockDone]:
        return list(walk(enc, tokens, None, Totals()))

    whole = events()
    monkeypatch.setattr(inspect_module, "RESET_AFTER", 7)
    assert events() == whole
    assert sum(len(e.diagnostics) for e in whole if isinstance(e, BlockDone)) > 10


def _peak(path: Path) -> int:
    tracemalloc.start()
    try:
        assert main(["inspect", str(path), "--html", str(path.with_suffix(".html"))]) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_input(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small parser and read sizes, so that a small file already shows the steady state.
    monkeypatch.setattr(inspect_module, "RESET_AFTER", 2048)
    monkeypatch.setattr(tokens_module, "_CHUNK", 4096)
    monkeypatch.setattr(main_module.sys, "stdout", io.StringIO())
    ids = unit_ids(enc, bad=False)
    small = write_ids(tmp_path / "small.ids", ids, 400)  # 16,000 tokens, 52 KB
    large = write_ids(tmp_path / "large.ids", ids, 1600)  # four times as many
    main(["inspect", str(small), "--html", str(tmp_path / "warm.html")])  # load, fill caches
    small_peak, large_peak = _peak(small), _peak(large)
    # holding every token (as the old code did, several objects each) would make
    # the large peak 48,000 tokens x 100 bytes or more above the small one
    assert large_peak < 1.2 * small_peak + 100_000, (small_peak, large_peak)
    page = large.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count("<span title=") + page.count('<span class="sp" title=') == 1600 * len(ids)


def test_the_page_is_written_while_reading(enc: harmonia.HarmonyEncoding) -> None:
    ids = unit_ids(enc, bad=True)
    consumed = 0

    def source() -> Iterator[int]:
        nonlocal consumed
        for token in itertools.chain.from_iterable(itertools.repeat(ids, 200)):
            consumed += 1
            yield token

    class Sink(io.StringIO):
        first_token_at: int | None = None

        def write(self, text: str) -> int:
            if self.first_token_at is None and "<span" in text:
                self.first_token_at = consumed
            return super().write(text)

    sink = Sink()
    totals = Totals()
    write_html(walk(enc, source(), None, totals), totals, sink)
    assert sink.first_token_at is not None and sink.first_token_at <= 1
    assert totals.tokens == consumed == 200 * len(ids)
    # the totals, known only at the end, come last in the file and first on screen
    assert sink.getvalue().endswith(
        f'<div class="summary">{totals.tokens} tokens · 400 messages · {totals.diagnostics} '
        "diagnostics · hover a token for its index and id</div>\n</body></html>\n"
    )


def test_progress_when_asked(
    enc: harmonia.HarmonyEncoding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = unit_ids(enc, bad=False)
    path = write_ids(tmp_path / "c.ids", ids, 1 + 70_000 // len(ids))
    clock = itertools.count(0.0, 5.0)
    monkeypatch.setattr(tokens_module, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    page = str(tmp_path / "c.html")
    assert main(["inspect", str(path), "--html", page], stdout=io.StringIO()) == 0
    assert capsys.readouterr().err == ""  # stderr is not a terminal here
    # The page exists now: --force replaces it (without it the command refuses).
    assert main(["inspect", str(path), "--html", page], stdout=io.StringIO()) == 1
    assert "--force replaces it" in capsys.readouterr().err
    again = ["inspect", str(path), "--html", page, "--force", "--progress", "lines"]
    assert main(again, stdout=io.StringIO()) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[0].startswith("harmonia inspect: 65,536 tokens (")
    assert lines[0].endswith("%), 5 s")


def test_a_huge_page_is_announced(
    enc: harmonia.HarmonyEncoding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = unit_ids(enc, bad=False)
    path = write_ids(tmp_path / "c.ids", ids, 100)
    page = tmp_path / "c.html"
    assert main(["inspect", str(path), "--html", str(page)], stdout=io.StringIO()) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(main_module, "HUGE_PAGE", 10_000)
    again = ["inspect", str(path), "--html", str(page), "--force"]
    assert main(again, stdout=io.StringIO()) == 0
    [line] = capsys.readouterr().err.splitlines()
    estimate = 100 * len(ids)
    assert line.startswith(f"harmonia inspect: about {estimate:,} tokens: the page will be about")
    # the estimate is close to what was written
    assert 0.5 < page.stat().st_size / (estimate * inspect_module.PAGE_BYTES_PER_TOKEN) < 2
