"""Every engine splits text as the reference does, including on the code points
where quicktok's Unicode tables are newer than the reference's (``_tokenizer/unicode16.py``)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from harmonia._tokenizer import registry
from harmonia._tokenizer.unicode16 import UNICODE_16_OVERRIDES

ref: Any = pytest.importorskip("openai_harmony", reason="differential checks are optional")
pytestmark = pytest.mark.differential

ENGINES = ("python", "quicktok", "auto")


def probe(c: str) -> str:
    """One text that exposes every o200k class of ``c``: as a letter after an ASCII
    one, before a contraction, beside digits, and after an apostrophe."""
    return f"%{c}xxt {c}'LVe {c}1a I'{c}ab'{c}cd {c}{c}"


def _check(ref_enc: Any, texts: list[str]) -> None:
    for name in ENGINES:
        engine = registry.get_engine(name)
        wrong = [
            t
            for t in texts
            if engine.encode_ordinary(t)
            != ref_enc.encode(t, allowed_special=set(), disallowed_special=())
        ]
        assert wrong == [], f"engine {name}: {len(wrong)} texts differ, e.g. {wrong[0]!r}"


def test_code_points_whose_class_changed_after_unicode_16(ref_enc: Any) -> None:
    code_points = [cp for lo, hi, _ in UNICODE_16_OVERRIDES for cp in range(lo, hi + 1)]
    assert len(code_points) > 4000
    _check(ref_enc, [probe(chr(cp)) for cp in code_points])


def test_long_s_after_an_apostrophe_is_a_contraction(ref_enc: Any) -> None:
    texts = [f"{w}'\u017f{tail}" for w in (" I", "it", "X", "é") for tail in ("", "ab", " x")]
    _check(ref_enc, texts)


def test_a_sample_of_all_other_code_points(ref_enc: Any) -> None:
    rng = random.Random(16)
    sample = [rng.randrange(0x80, 0x110000) for _ in range(6000)]
    _check(ref_enc, [probe(chr(cp)) for cp in sample if not 0xD800 <= cp <= 0xDFFF])
