"""The pure-Python encoder and the tiered engine: exactly quicktok's ids, always."""

from __future__ import annotations

import random
import struct
import sys
import threading
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harmonia
from harmonia._tokenizer import Tokenizer, auto_engine, python_engine, registry, vocab_file
from harmonia._tokenizer.unicode16 import UNICODE_16_OVERRIDES

sys.path.insert(0, str(Path(__file__).parent.parent.parent / "benchmarks"))
import workloads
from quicktok_build import QUICK, CountingBuild
from tokenizer_corpus import varied_corpus

PY = registry.get_engine("python")


def _chunks_of_every_code_point(size: int = 48) -> list[str]:
    """Every code point but the surrogates, ``size`` at a time between letters."""
    texts = []
    for low in range(0, 0x110000, size):
        top = min(low + size, 0x110000)
        chars = [chr(c) for c in range(low, top) if not 0xD800 <= c <= 0xDFFF]
        texts.append("x" + "".join(chars) + " y'S" + "".join(reversed(chars)) + "\n")
    return texts


def _mixed(rng: random.Random) -> str:
    pieces = ["'s", "'LL", "'ſ", "'Ve", " ", "  ", "\n", "\r\n", "\t", "/", "123456", "x"]
    out = []
    for _ in range(rng.randint(1, 40)):
        roll = rng.random()
        if roll < 0.3:
            code_point = rng.randint(0, 127)
        elif roll < 0.6:
            code_point = rng.randint(128, 0x2FFF)
        elif roll < 0.9:
            code_point = rng.randint(0x3000, 0x2FFFF)
        else:
            code_point = rng.randint(0x30000, 0x10FFFF)
        if 0xD800 <= code_point <= 0xDFFF:
            code_point = 0x20
        out.append(chr(code_point))
        if rng.random() < 0.25:
            out.append(rng.choice(pieces))
    return "".join(out)


def _corpus() -> list[str]:
    rng = random.Random(2024)
    texts = varied_corpus() + _chunks_of_every_code_point()
    texts += [_mixed(rng) for _ in range(2000)]
    texts += [workloads.big_text()]
    texts += ["a" * 5000, " " * 3000, "ab" * 4000 + "!", "\n" * 2000, "'" * 999, "😀" * 500]
    texts += ["x" + "\u0301" * 300, "1" * 1000, " \r\n" * 700, "Hello" * 900]
    return texts


def test_python_encoder_gives_quicktoks_ids_on_every_code_point_and_more() -> None:
    mismatches = [t for t in _corpus() if PY.encode_ordinary(t) != QUICK.encode_ordinary(t)]
    assert mismatches == []


def test_pieces_cover_the_text_exactly() -> None:
    for text in _corpus()[:3000]:
        assert "".join(PY.split(text)) == text


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=60))
def test_any_text_encodes_like_quicktok(text: str) -> None:
    assert PY.encode_ordinary(text) == QUICK.encode_ordinary(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_long_and_short_merges_agree(data: bytes) -> None:
    ranks = PY._ranks
    assert python_engine.merge_long(data, ranks) == python_engine.merge_short(data, ranks)


def test_long_pieces_take_the_heap_merge_and_stay_exact() -> None:
    for text in ["é" * 200, "ab" * 700, "x" * 3000, "日本語" * 100]:
        assert len(text.encode()) > python_engine._SHORT_PIECE
        assert PY.encode_ordinary(text) == QUICK.encode_ordinary(text)


def test_repeat_encodes_come_from_the_piece_cache_and_stay_equal() -> None:
    text = workloads.big_text()
    first = PY.encode_ordinary(text)
    assert PY.encode_ordinary(text) == first
    assert "the" in PY._cache or " the" in PY._cache


def test_piece_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = python_engine.PythonBpe(vocab_file.ordinary_ranks(), vocab_file.unicode_classes())
    monkeypatch.setattr(python_engine, "_PIECE_CACHE_LIMIT", 10)
    text = " ".join(f"w{i}" for i in range(100))
    assert engine.encode_ordinary(text) == QUICK.encode_ordinary(text)
    assert len(engine._cache) <= 10


def test_python_encoder_rejects_what_the_engines_reject() -> None:
    with pytest.raises(TypeError, match="can only encode str"):
        PY.encode_ordinary(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        PY.encode_ordinary("a\ud800b")
    # The tokenizer replaces lone surrogates, whichever engine is below it.
    assert Tokenizer(PY).encode_ordinary("a\ud800b") == Tokenizer(QUICK).encode_ordinary("a\ud800b")


# -- the tiered engine ------------------------------------------------------------------


class _Metered:
    """The Python engine, with a clock that counts its work instead of reading the time.

    Each character encoded costs ``seconds_per_char`` of the clock, so the tiered
    engine's decisions follow the work done, never the machine's speed or load.
    """

    name = "python"

    def __init__(self, seconds_per_char: float) -> None:
        self.rate = seconds_per_char
        self.now = 0.0
        self.token_bytes = PY.token_bytes
        self.split = PY.split  # type: ignore[attr-defined]

    def clock(self) -> float:
        return self.now

    def encode_ordinary(self, text: str) -> list[int]:
        self.now += self.rate * len(text)
        return PY.encode_ordinary(text)

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        self.now += self.rate * sum(map(len, pieces))
        return PY.encode_pieces(pieces)  # type: ignore[attr-defined, no-any-return]


def _tiered(
    build: CountingBuild, seconds: float, seconds_per_char: float = 1e-6
) -> auto_engine.TieredEngine:
    python = _Metered(seconds_per_char)
    return auto_engine.TieredEngine(python, build, switch_after_seconds=seconds, clock=python.clock)


def test_tiered_engine_starts_in_python_and_switches_once_it_pays() -> None:
    build = CountingBuild()
    engine = _tiered(build, 0.002)
    assert engine.status == "python"
    text = workloads.big_text()
    expected = QUICK.encode_ordinary(text)
    results = [engine.encode_ordinary(text) for _ in range(5)]
    assert results == [expected] * 5
    assert engine.status == "quicktok"
    assert build.calls == 1
    assert engine._python is None  # the Python tables were released
    assert engine.token_bytes(1000) == QUICK.token_bytes(1000)


def test_tiered_engine_that_never_pays_never_builds() -> None:
    build = CountingBuild()
    engine = auto_engine.TieredEngine(PY, build, switch_after_seconds=float("inf"))
    for text in varied_corpus()[:50]:
        assert engine.encode_ordinary(text) == QUICK.encode_ordinary(text)
    assert build.calls == 0
    assert engine.status == "python"


def test_tiered_engine_keeps_encoding_when_quicktok_cannot_be_built() -> None:
    build = CountingBuild(fail=True)
    engine = auto_engine.TieredEngine(PY, build, switch_after_seconds=0.0)
    for _ in range(3):
        assert engine.encode_ordinary("Hello world") == QUICK.encode_ordinary("Hello world")
    assert build.calls == 1  # tried once, not on every call
    assert engine.status == "python (quicktok unavailable: no tables today)"


def test_tiered_engine_builds_once_under_concurrent_use() -> None:
    build = CountingBuild()
    engine = auto_engine.TieredEngine(PY, build, switch_after_seconds=0.0)
    texts = varied_corpus()[:40]
    expected = [QUICK.encode_ordinary(t) for t in texts]
    failures: list[str] = []

    def work() -> None:
        if [engine.encode_ordinary(t) for t in texts] != expected:
            failures.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert build.calls == 1


def test_a_big_random_text_switches_after_its_first_part_and_stays_exact() -> None:
    # Random words cost about a microsecond a character in Python: the first part
    # predicts more than the budget, and quicktok takes the rest of the text.
    build = CountingBuild()
    engine = _tiered(build, 0.01, seconds_per_char=1e-6)
    rng = random.Random(5)
    text = "".join(rng.choice("abcdefghij ,.\n") for _ in range(60_000))
    assert engine.encode_ordinary(text) == QUICK.encode_ordinary(text)
    assert build.calls == 1 and engine.status == "quicktok"


def test_a_big_cheap_text_stays_in_python() -> None:
    # A run of one character is tiled in linear time: encoding it costs less than
    # building quicktok, so a text that size alone does not make the switch. The
    # clock counts characters at a cheap text's rate (0.05 us each), so the first
    # part predicts that the rest fits in the budget, on any machine.
    build = CountingBuild()
    engine = _tiered(build, 0.05, seconds_per_char=5e-8)
    for text in (" " * 200_000, "a" * 200_000, "\n" * 200_000):
        assert engine.encode_ordinary(text) == QUICK.encode_ordinary(text)
    assert build.calls == 0 and engine.status == "python"
    # The same text at an expensive text's rate switches after its first part.
    build = CountingBuild()
    engine = _tiered(build, 0.05, seconds_per_char=1e-6)
    assert engine.encode_ordinary("a" * 200_000) == QUICK.encode_ordinary("a" * 200_000)
    assert build.calls == 1 and engine.status == "quicktok"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=80), st.integers(0, 99))
def test_a_text_encodes_in_parts_cut_at_any_piece_boundary(text: str, where: int) -> None:
    # What lets the big-text path hand the rest of a text to quicktok: the
    # pieces after a boundary are those of the rest of the text, in every engine.
    pieces = PY.split(text)
    cut = where % (len(pieces) + 1)
    head, rest = "".join(pieces[:cut]), "".join(pieces[cut:])
    whole = QUICK.encode_ordinary(text)
    assert PY.encode_pieces(pieces[:cut]) + QUICK.encode_ordinary(rest) == whole
    assert QUICK.encode_ordinary(head) + PY.encode_ordinary(rest) == whole


def test_auto_is_the_default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry.ENGINE_ENV_VAR, raising=False)
    engine = registry.get_engine()
    assert isinstance(engine, auto_engine.TieredEngine)
    assert engine.name == "auto"
    enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    assert "engine=auto" in repr(enc)


def test_environment_variable_picks_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.ENGINE_ENV_VAR, "python")
    assert registry.get_engine() is PY
    enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    assert "engine=python" in repr(enc)


def test_every_engine_renders_the_same_tokens() -> None:
    conv = harmonia.Conversation.from_messages(
        [
            harmonia.Message.from_role_and_content(
                harmonia.Role.SYSTEM, harmonia.SystemContent.new().with_browser_tool()
            ),
            harmonia.Message.from_role_and_content(
                harmonia.Role.USER, "Grüße 😀 from Zürich, naïve café — 東京 'S don'T"
            ),
        ]
    )
    rendered = {
        name: harmonia.load_harmony_encoding(
            "HarmonyGptOss", engine=name
        ).render_conversation_for_completion(conv, harmonia.Role.ASSISTANT)
        for name in ("auto", "python", "quicktok")
    }
    assert rendered["auto"] == rendered["python"] == rendered["quicktok"]


# -- reading quicktok's files -----------------------------------------------------------


def _vocab_bytes() -> bytes:
    return Path(vocab_file.quicktok_data_file("o200k.vocab")).read_bytes()


def test_checked_parse_agrees_with_the_pinned_fast_parse() -> None:
    assert vocab_file.parse_vocab(_vocab_bytes()) == vocab_file.ordinary_ranks()


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-3],  # truncated
        lambda d: d + b"\0",  # trailing bytes
        lambda d: struct.pack("<I", 5) + d[4:],  # wrong count
        lambda d: d[:4] + d[4:7] + d[11:],  # a record shifted: misaligned
        lambda d: b"",
    ],
)
def test_damaged_vocab_files_are_refused(damage) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(harmonia.VocabularyError, match="not in the expected format"):
        vocab_file.parse_vocab(damage(_vocab_bytes()))


def test_duplicate_rank_is_refused() -> None:
    data = bytearray(_vocab_bytes())
    # The first record is rank 0 (length 1): give it rank 1, which the second has too.
    assert data[4:6] == b"\x01\x00"
    data[7:11] = struct.pack("<I", 1)
    with pytest.raises(harmonia.VocabularyError, match="not in the expected format"):
        vocab_file.parse_vocab(bytes(data))


def test_unpinned_vocab_file_is_checked_against_the_official_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(vocab_file, "QUICKTOK_VOCAB_SHA256", "0" * 64)
    assert vocab_file._load_ranks() == vocab_file.ordinary_ranks()


def test_unreadable_vocab_format_falls_back_to_quicktok(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vocab_file, "_read", lambda name: b"not a vocabulary")
    assert vocab_file._load_ranks() == vocab_file.ordinary_ranks()


def test_wrong_vocabulary_is_refused_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = list(vocab_file.ordinary_ranks())
    ranks[1000], ranks[1001] = ranks[1001], ranks[1000]
    monkeypatch.setattr(vocab_file, "QUICKTOK_VOCAB_SHA256", "0" * 64)
    monkeypatch.setattr(vocab_file, "parse_vocab", lambda data: ranks)
    with pytest.raises(harmonia.VocabularyError, match="reinstall quicktok-v1"):
        vocab_file._load_ranks()


def test_unicode_class_table_is_parsed_and_damage_refused() -> None:
    data = Path(vocab_file.quicktok_data_file("uniclass_o200k.bin")).read_bytes()
    classes = vocab_file.parse_unicode_classes(data)
    assert classes.signature(ord("a")) == python_engine.LETTER | python_engine.LOWER
    assert classes.signature(ord("Q")) == python_engine.LETTER | python_engine.UPPER
    assert classes.signature(ord("7")) == python_engine.NUMBER
    assert classes.signature(0x3000) == python_engine.SPACE  # ideographic space
    assert classes.signature(0x301) == python_engine.UPPER | python_engine.LOWER  # a combining mark
    assert classes.signature(ord("!")) == 0
    for damaged in (data[:-1], data + b"\0\0\0\0", b"\xff\xff\xff\xff"):
        with pytest.raises(harmonia.VocabularyError, match="uniclass_o200k.bin"):
            vocab_file.parse_unicode_classes(damaged)


def test_auto_without_the_class_table_uses_quicktok(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_classes() -> python_engine.UnicodeClasses:
        raise harmonia.VocabularyError("no table")

    monkeypatch.setattr(registry, "unicode_classes", no_classes)
    assert registry._build("auto") is QUICK
    with pytest.raises(harmonia.VocabularyError, match="no table"):
        registry._build("python")
    # quicktok itself then loads its own bundled files, as they are.
    bundled = registry._build("quicktok")
    assert bundled is not QUICK
    assert bundled.encode_ordinary("Hello, world") == QUICK.encode_ordinary("Hello, world")


# -- the reference's Unicode version and its case folding ------------------------------


def _raw_quicktok_classes() -> python_engine.UnicodeClasses:
    data = Path(vocab_file.quicktok_data_file("uniclass_o200k.bin")).read_bytes()
    return vocab_file.parse_unicode_classes(data)


def test_classes_follow_unicode_16_where_quicktoks_table_is_newer() -> None:
    raw, ours = _raw_quicktok_classes(), vocab_file.unicode_classes()
    tangut_component = 0x18DD0  # assigned (a letter) in Unicode 17 only
    assert (
        raw.signature(tangut_component)
        == python_engine.LETTER | python_engine.UPPER | python_engine.LOWER
    )
    assert ours.signature(tangut_component) == 0
    assert (
        raw.signature(0x295) != ours.signature(0x295) == python_engine.LETTER | python_engine.LOWER
    )
    # Unassigned in Unicode 16, it is punctuation-like: it joins the "%".
    assert PY.split("\U00018dd0%xxt") == ["\U00018dd0%", "xxt"]
    assert QUICK.encode_ordinary("\U00018dd0%xxt") == PY.encode_ordinary("\U00018dd0%xxt")
    # Everywhere else the two tables agree.
    for cp in random.Random(5).sample(range(0x110000), 20000):
        if not any(lo <= cp <= hi for lo, hi, _ in UNICODE_16_OVERRIDES):
            assert raw.signature(cp) == ours.signature(cp), hex(cp)


def test_long_s_counts_as_s_in_contractions_in_every_engine() -> None:
    # The reference folds case the Unicode way, so "'ſ" is the contraction "'s".
    assert PY.split(" I'\u017f") == [" I'\u017f"]
    assert PY.split(" I's") == [" I's"]
    text = " I'\u017f and it'\u017f"
    assert QUICK.encode_ordinary(text) == PY.encode_ordinary(text)
    assert QUICK._quick(text) != PY.encode_ordinary(text)  # quicktok alone would differ
    assert "\u017f" in PY.split("a\u017fb")[0]  # elsewhere it is just a letter


def test_class_table_round_trips_through_quicktoks_format() -> None:
    ours = vocab_file.unicode_classes()
    again = vocab_file.parse_unicode_classes(vocab_file.unicode_classes_bytes(ours))
    for bit in python_engine.CLASS_BITS:
        assert again.ranges(bit) == ours.ranges(bit)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6)), max_size=8),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6), st.integers(0, 31)), max_size=5),
)
def test_overrides_behave_like_sets(
    raw: list[tuple[int, int]], raw_overrides: list[tuple[int, int, int]]
) -> None:
    def disjoint(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        taken: set[int] = set()
        out = []
        for start, width in sorted(spans):
            cps = set(range(start, start + width + 1))
            if not cps & taken:
                taken |= cps
                out.append((start, start + width))
        return out

    base = disjoint(raw)
    spans = disjoint([(s, w) for s, w, _ in raw_overrides])
    sigs = {s: sig for s, _, sig in raw_overrides}
    overrides = [(lo, hi, sigs[lo]) for lo, hi in spans]
    classes = python_engine.UnicodeClasses([base] * 5).with_overrides(overrides)
    for cp in range(0, 70):
        forced = [sig for lo, hi, sig in overrides if lo <= cp <= hi]
        inside = any(lo <= cp <= hi for lo, hi in base)
        expected = forced[0] if forced else (0b11111 if inside else 0)
        assert classes.signature(cp) == expected
    for bit in python_engine.CLASS_BITS:
        ranges = classes.ranges(bit)
        assert all(a[1] + 1 < b[0] for a, b in pairwise(ranges))
