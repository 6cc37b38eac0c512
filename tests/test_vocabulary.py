"""The format's vocabulary is spelled once: no special-token id or channel word elsewhere.

``harmonia.vocabulary`` names the channels, the special-token ids and the
defaults; ``_names`` and ``_tokenizer/special_tokens.py`` define them. Any other
module of ``src/harmonia`` that writes ``200002`` or ``"final"`` as a literal,
or format text inside a string (``"<|start|>assistant"``,
``"<|channel|>final<|message|>"``: a special token's text joined to a word or to
another token; or two tokens' names joined by ``|``, as a regex spells them) fails
:func:`test_no_literal_outside_the_vocabulary`. Docstrings
(doctests show ids) and ``Literal[...]`` types (which cannot name a constant)
are not code that spells the vocabulary, and are skipped; so are the few
sentences written for a person (:data:`PROSE`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import harmonia
from harmonia import vocabulary as v

SRC = Path(__file__).resolve().parent.parent / "src" / "harmonia"
#: Where the vocabulary is defined.
DEFINITIONS = frozenset({"_names.py", "vocabulary.py", "_tokenizer/special_tokens.py"})
CHANNEL_WORDS = frozenset(v.CHANNELS)
_NAMED_IDS = (
    v.STARTOFTEXT_ID,
    v.ENDOFTEXT_ID,
    v.RETURN_ID,
    v.CONSTRAIN_ID,
    v.CHANNEL_ID,
    v.START_ID,
    v.END_ID,
    v.MESSAGE_ID,
    v.CALL_ID,
)
_TOKEN = "(?:" + "|".join(re.escape(v.special_text(t)) for t in _NAMED_IDS) + ")"
_NAME = "(?:" + "|".join(v.special_text(t)[2:-2] for t in _NAMED_IDS) + ")"
#: Format text: a special token's text joined to a lower-case word or to another token,
#: or two tokens' names joined by ``|`` (a regex that spells the tokens again).
FORMAT_TEXT = re.compile(rf"{_TOKEN}(?:[a-z]|{_TOKEN})|[a-z]{_TOKEN}|\b{_NAME}\|{_NAME}\b")
#: Strings written for a person that quote format text: (module, a piece of the string).
PROSE = frozenset(
    {
        ("_cli/main.py", "if the input is model output after <|start|>assistant"),
        ("constrained/_grammar.py", "// One gpt-oss assistant turn in the harmony format"),
        ("engines/_spec.py", "expected a JSON list of completions, one per model step"),
    }
)


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


def literals(source: str, module: str = "") -> list[tuple[int, object]]:
    """(line, value) of each special-token id, channel word or piece of format text
    written as a literal."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _literal_types(tree)
    prose = [piece for where, piece in PROSE if where == module]
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        value = node.value
        is_id = type(value) is int and v.FIRST_SPECIAL_ID <= value <= v.LAST_SPECIAL_ID
        if (
            is_id
            or (isinstance(value, str) and value in CHANNEL_WORDS)
            or (
                isinstance(value, str)
                and FORMAT_TEXT.search(value)
                and not any(piece in value for piece in prose)
            )
        ):
            out.append((node.lineno, value))
    return sorted(out, key=lambda hit: (hit[0], str(hit[1])))


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


def test_the_checker_finds_format_text_inside_strings() -> None:
    source = """
header = "<|start|>assistant"
probe = f"<|channel|>final<|message|>{text}"
stop = "<|end|>"
said = "the message ended without <|end|>, <|call|> or <|return|>"
special = r"<\\|(start|end|call)\\|>"
"""
    assert literals(source) == [
        (2, "<|start|>assistant"),
        (3, "<|channel|>final<|message|>"),
        (6, r"<\|(start|end|call)\|>"),
    ]


def test_no_literal_outside_the_vocabulary() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in DEFINITIONS:
            continue
        hits = literals(path.read_text(), relative)
        found += [f"{relative}:{line}: {value!r}" for line, value in hits]
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
