"""Every engine splits text as the reference does, including on the code points
where quicktok's Unicode tables are newer than the reference's (``_tokenizer/unicode16.py``)."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

import harmonia
from harmonia._tokenizer import registry
from harmonia._tokenizer.unicode16 import UNICODE_16_OVERRIDES

ref: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
pytestmark = pytest.mark.differential

ENGINES = ("python", "quicktok", "auto")


@pytest.fixture(scope="module")
def reference() -> Any:
    if not (Path(os.environ.get("TIKTOKEN_ENCODINGS_BASE", "")) / "o200k_base.tiktoken").exists():
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = os.path.dirname(
            harmonia.write_tiktoken_file(tempfile.mkdtemp())
        )
    return ref.load_harmony_encoding(ref.HarmonyEncodingName.HARMONY_GPT_OSS)


def probe(c: str) -> str:
    """One text that exposes every o200k class of ``c``: as a letter after an ASCII
    one, before a contraction, beside digits, and after an apostrophe."""
    return f"%{c}xxt {c}'LVe {c}1a I'{c}ab'{c}cd {c}{c}"


def _check(reference: Any, texts: list[str]) -> None:
    for name in ENGINES:
        engine = registry.get_engine(name)
        wrong = [
            t
            for t in texts
            if engine.encode_ordinary(t)
            != reference.encode(t, allowed_special=set(), disallowed_special=())
        ]
        assert wrong == [], f"engine {name}: {len(wrong)} texts differ, e.g. {wrong[0]!r}"


def test_code_points_whose_class_changed_after_unicode_16(reference: Any) -> None:
    code_points = [cp for lo, hi, _ in UNICODE_16_OVERRIDES for cp in range(lo, hi + 1)]
    assert len(code_points) > 4000
    _check(reference, [probe(chr(cp)) for cp in code_points])


def test_long_s_after_an_apostrophe_is_a_contraction(reference: Any) -> None:
    texts = [f"{w}'\u017f{tail}" for w in (" I", "it", "X", "é") for tail in ("", "ab", " x")]
    _check(reference, texts)


def test_a_sample_of_all_other_code_points(reference: Any) -> None:
    rng = random.Random(16)
    sample = [rng.randrange(0x80, 0x110000) for _ in range(6000)]
    _check(reference, [probe(chr(cp)) for cp in sample if not 0xD800 <= cp <= 0xDFFF])
