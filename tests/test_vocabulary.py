"""The format's vocabulary is spelled once: no special-token id or channel word elsewhere.

``harmonia.vocabulary`` names the channels, the special-token ids and the
defaults; ``_names`` and ``_tokenizer/special_tokens.py`` define them. Any other
module of ``src/harmonia`` that writes ``200002`` or ``"final"`` as a literal
fails :func:`test_no_literal_outside_the_vocabulary`. Docstrings (doctests show
ids) and ``Literal[...]`` types (which cannot name a constant) are not code
that spells the vocabulary, and are skipped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import harmonia
from harmonia import vocabulary as v

SRC = Path(__file__).resolve().parent.parent / "src" / "harmonia"
#: Where the vocabulary is defined.
DEFINITIONS = frozenset({"_names.py", "vocabulary.py", "_tokenizer/special_tokens.py"})
CHANNEL_WORDS = frozenset(v.CHANNELS)


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _literal_types(tree: ast.AST) -> set[int]:
    """Constants inside ``Literal[...]`` subscripts."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            name = node.value
            named = name.id if isinstance(name, ast.Name) else getattr(name, "attr", None)
            if named == "Literal":
                found |= {id(n) for n in ast.walk(node.slice) if isinstance(n, ast.Constant)}
    return found


def literals(source: str) -> list[tuple[int, object]]:
    """(line, value) of each special-token id or channel word written as a literal."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _literal_types(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        value = node.value
        is_id = type(value) is int and v.FIRST_SPECIAL_ID <= value <= v.LAST_SPECIAL_ID
        if is_id or (isinstance(value, str) and value in CHANNEL_WORDS):
            out.append((node.lineno, value))
    return sorted(out)


def test_the_checker_finds_ids_and_channel_words() -> None:
    source = '''
"""Docstring: 200002 and "final" are fine here."""
from typing import Literal
Phase = Literal["final", "commentary"]
END = 200_007
def f(channel):
    """Also fine: 'final'."""
    return channel == "analysis" or channel == "finally"
'''
    assert literals(source) == [(5, 200007), (8, "analysis")]


def test_no_literal_outside_the_vocabulary() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in DEFINITIONS:
            continue
        found += [f"{relative}:{line}: {value!r}" for line, value in literals(path.read_text())]
    assert found == [], "use harmonia.vocabulary's names:\n" + "\n".join(found)


def test_the_vocabulary_matches_the_encoding() -> None:
    enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    for name in ("START", "END", "MESSAGE", "CHANNEL", "CONSTRAIN", "RETURN", "CALL"):
        text = f"<|{name.lower()}|>"
        assert enc.encode(text, allowed_special="all") == [getattr(v, f"{name}_ID")]
        assert v.special_text(getattr(v, f"{name}_ID")) == text
    assert set(enc.stop_tokens_for_assistant_actions()) == set(v.ACTION_STOP_IDS)
    assert v.is_special_id(v.FIRST_SPECIAL_ID) and not v.is_special_id(v.FIRST_SPECIAL_ID - 1)
    assert v.DEFAULT_COT_POLICY in v.COT_POLICY_NAMES
