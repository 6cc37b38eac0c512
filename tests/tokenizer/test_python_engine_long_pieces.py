"""Long pieces never take the slow Python merge, and stay exactly quicktok's ids.

Before: one megabyte of spaces (or newlines, tabs, one letter, one long word) was
a single piece merged by the pure-Python heap merge, five to ten seconds in a
fresh process, because the auto engine switches to quicktok only after a call.
"""

from __future__ import annotations

import random

import pytest
from quicktok_build import QUICK, CountingBuild

from harmonia._tokenizer import auto_engine as _tiered
from harmonia._tokenizer import python_engine as _pybpe
from harmonia._tokenizer import registry as _registry
from harmonia._tokenizer import vocab_file as _vocab

# Units whose long runs are common pathological inputs, plus multi-byte ones and
# ones whose runs do not tile (they must still be exact).
UNITS = [" ", "a", "Z", "\n", "\t", "!", "-", "=", "\r\n", " \n", "ab", "é", "中", "😀", "\n\n "]


@pytest.fixture
def python_engine() -> _pybpe.PythonBpe:
    # A fresh encoder: no tiles learnt, no pieces cached.
    return _pybpe.PythonBpe(_vocab.ordinary_ranks(), _vocab.unicode_classes())


@pytest.fixture
def merged_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Byte sizes of every piece that goes through the heap merge."""
    sizes: list[int] = []
    real = _pybpe.merge_long

    def recording(data: bytes, ranks: dict[bytes, int]) -> tuple[int, ...]:
        sizes.append(len(data))
        return real(data, ranks)

    monkeypatch.setattr(_pybpe, "merge_long", recording)
    return sizes


@pytest.mark.parametrize("unit", UNITS)
def test_long_runs_encode_like_quicktok(python_engine: _pybpe.PythonBpe, unit: str) -> None:
    rng = random.Random(unit)
    unit_bytes = len(unit.encode())
    shortest = _pybpe._TILE_MIN // unit_bytes
    # Lengths around the tiling threshold (every residue of the longest token) and beyond.
    counts = [shortest + k for k in range(0, 130, 9)] + [rng.randint(5_000, 60_000)]
    for count in counts:
        text = unit * count + unit[: rng.randint(0, len(unit) - 1)]
        assert python_engine.encode_ordinary(text) == QUICK.encode_ordinary(text), (unit, count)


@pytest.mark.parametrize("unit", [" ", "a", "\n", "\t", "!", "\r\n", " \n"])
def test_a_megabyte_run_merges_only_a_small_tail(
    python_engine: _pybpe.PythonBpe, merged_sizes: list[int], unit: str
) -> None:
    text = unit * (1_000_000 // len(unit))
    ids = python_engine.encode_ordinary(text)
    assert ids == QUICK.encode_ordinary(text)
    assert merged_sizes and max(merged_sizes) <= 3 * _pybpe._TILE_WINDOW


def test_a_run_inside_text_is_tiled_too(python_engine: _pybpe.PythonBpe) -> None:
    text = "Hello" + " " * 300_000 + "world\n" + "\n" * 200_000 + "x" * 100_000 + "!"
    assert python_engine.encode_ordinary(text) == QUICK.encode_ordinary(text)


def _tiered_engine(build: CountingBuild) -> tuple[_tiered.TieredEngine, _pybpe.PythonBpe]:
    python = _pybpe.PythonBpe(_vocab.ordinary_ranks(), _vocab.unicode_classes())
    # Never switches on time: only a long piece may trigger the build.
    engine = _tiered.TieredEngine(python, build, switch_after_seconds=float("inf"))
    python.long_piece_delegate = engine.encode_long_piece
    return engine, python


def test_a_long_word_goes_to_quicktok_at_once(merged_sizes: list[int]) -> None:
    rng = random.Random(7)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(40_000))
    text = "short words first, then " + word + " and more"
    build = CountingBuild()
    engine, _ = _tiered_engine(build)
    assert engine.encode_ordinary(text) == QUICK.encode_ordinary(text)
    assert build.calls == 1 and engine.status == "quicktok"
    assert not merged_sizes or max(merged_sizes) < _pybpe._DELEGATE_PIECE


def test_a_long_word_is_merged_in_python_when_quicktok_is_unavailable() -> None:
    rng = random.Random(8)
    word = "".join(rng.choice("qwertyuiop") for _ in range(20_000))
    build = CountingBuild(fail=True, error=RuntimeError)
    engine, _ = _tiered_engine(build)
    for _ in range(2):
        assert engine.encode_ordinary(word) == QUICK.encode_ordinary(word)
    assert build.calls == 1
    assert engine.status == "python (quicktok unavailable: no tables today)"


def test_the_auto_engine_delegates_long_pieces() -> None:
    engine = _registry._build("auto")  # a fresh one: the process-wide one may have switched
    assert isinstance(engine, _tiered.TieredEngine)
    python = engine._python
    assert isinstance(python, _pybpe.PythonBpe)
    assert python.long_piece_delegate == engine.encode_long_piece


class _SpyPython:
    """The Python encoder, counting the characters it is asked to encode."""

    name = "python"

    def __init__(self) -> None:
        self.inner = _pybpe.PythonBpe(_vocab.ordinary_ranks(), _vocab.unicode_classes())
        self.chars = 0
        self.token_bytes = self.inner.token_bytes

    def encode_ordinary(self, text: str) -> list[int]:
        self.chars += len(text)
        return self.inner.encode_ordinary(text)


def test_a_text_too_big_for_the_budget_switches_before_it_is_encoded() -> None:
    python = _SpyPython()
    build = CountingBuild()
    engine = _tiered.TieredEngine(python, build, switch_after_seconds=0.05)
    small = "Hello world. " * 100
    assert engine.encode_ordinary(small) == QUICK.encode_ordinary(small)
    assert python.chars == len(small) and build.calls == 0
    big = "Ordinary words, nothing long. " * 5_000  # 150,000 characters: 0.15 s at least
    assert engine.encode_ordinary(big) == QUICK.encode_ordinary(big)
    assert python.chars == len(small)  # never reached the Python encoder
    assert build.calls == 1 and engine.status == "quicktok"
