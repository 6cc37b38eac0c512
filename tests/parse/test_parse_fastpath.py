"""Batch parsing's fast path gives exactly what the streaming parser gives.

:func:`fuzz_parse.check_fast_path` compares ``parse_completion`` (which takes
the fast path when it can) with a plain loop over the streaming parser, strict
and lenient, with ``complete`` false and true: the same messages and
diagnostics, or the same error (type, text, state, token, index); and whatever
:func:`read_clean` accepts, the streaming parser reads without an error or a
diagnostic. Hypothesis searches mostly-clean inputs here (the fast path's
territory); ``test_parse_fuzz.py`` and ``tools/fuzz_parse.py`` run the same
check over noisier ones.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from parse_support import ENC, SETTINGS, fp

import harmonia as h
from harmonia import Role
from harmonia._parse import MessageHeader
from harmonia._parse.fastpath import read_clean

TABLE = ENC.tokenizer.token_bytes_table

messages = st.lists(st.randoms(use_true_random=False).map(fp.random_message), max_size=4)
# (where, what): one token inserted, or one removed (None)
edits = st.lists(
    st.tuples(st.integers(0, 10_000), st.one_of(st.none(), st.sampled_from(fp.ODD_TOKENS))),
    max_size=2,
)


def tokens_of(msgs: list[h.Message]) -> list[int]:
    return [t for m in msgs for t in ENC.render(m)]


def clean(
    tokens: list[int], role: Role | None = None, **modes: bool
) -> list[tuple[MessageHeader, str]] | None:
    return read_clean(
        TABLE, tokens, role, strict=modes.get("strict", True), complete=modes.get("complete", False)
    )


@SETTINGS
@given(messages, edits, st.booleans())
def test_fast_path_changes_nothing(
    msgs: list[h.Message], ops: list[tuple[int, int | None]], given_role: bool
) -> None:
    tokens = tokens_of(msgs)
    role = None
    if given_role and tokens[:2] == [fp.START, 173781]:
        tokens, role = tokens[2:], Role.ASSISTANT  # the prompt ended with <|start|>assistant
    for where, token in ops:
        i = where % (len(tokens) + 1)
        tokens = (
            [*tokens[:i], token, *tokens[i:]] if token is not None else tokens[:i] + tokens[i + 1 :]
        )
    problems, _ = fp.check_fast_path(ENC, tokens, role)
    assert problems == []


@SETTINGS
@given(messages)
def test_clean_renderings_take_the_fast_path(msgs: list[h.Message]) -> None:
    """What harmonia renders, every mode reads without the streaming parser."""
    problems, taken = fp.check_fast_path(ENC, tokens_of(msgs), None)
    assert problems == []
    assert taken == 4


def test_characters_split_across_tokens() -> None:
    """One token per byte: every multi-byte character arrives in pieces."""
    byte_token = {b: i for i, b in enumerate(TABLE[:50_000]) if len(b) == 1}
    text = "💖 naïve 日本語"
    body = [byte_token[bytes([byte])] for byte in text.encode()]
    tokens = [*ENC.encode("<|channel|>final<|message|>", allowed_special="all"), *body]
    result = clean(tokens, Role.ASSISTANT)
    assert result is not None
    assert [(header.channel, t) for header, t in result] == [("final", text)]
    # Taken in strict mode; lenient mode reports the missing stop token.
    assert fp.check_fast_path(ENC, tokens, Role.ASSISTANT) == ([], 1)


@pytest.mark.parametrize(
    ("completion", "why"),
    [
        ("junk<|start|>assistant<|message|>x<|end|>", "text where <|start|> belongs"),
        ("<|start|>assistant<|channel|>final<|end|>", "a stop token ends a header"),
        ("<|start|>assistant<|start|>assistant<|message|>x<|end|>", "<|start|> in a header"),
        ("<|start|>assistant<|channel|>final", "the stream ends in a header"),
        ("<|start|>assistantfinal<|message|>x<|end|>", "a header strict mode refuses"),
        ("<|start|>assistant<|message|>x<|end|>y", "text after a stop token"),
        ("<|start|>assistant<|message|>x<|end|><|return|>", "two stop tokens"),
    ],
)
def test_what_the_streaming_parser_decides(completion: str, why: str) -> None:
    tokens = ENC.encode(completion, allowed_special="all")
    for strict in (True, False):
        assert clean(tokens, strict=strict) is None, why
    problems, taken = fp.check_fast_path(ENC, tokens, None)
    assert (problems, taken) == ([], 0)


@pytest.mark.parametrize("bad", [-1, 201089, 2**32 - 1, 2**40, 28823])
def test_bad_ids_and_bytes_in_content(bad: int) -> None:
    """Unknown ids and bytes that are not UTF-8 are the streaming parser's to repair."""
    head = ENC.encode("<|start|>assistant<|message|>a", allowed_special="all")
    tokens = [*head, bad, *ENC.encode("b<|end|>", allowed_special="all")]
    assert clean(tokens) is None
    assert fp.check_fast_path(ENC, tokens, None) == ([], 0)


def test_truncated_content() -> None:
    """Strict mode without complete=True keeps a cut-off message; the others need the parser."""
    tokens = ENC.encode("<|start|>assistant<|message|>cut", allowed_special="all")
    assert clean(tokens) is not None
    assert clean(tokens, complete=True) is None
    assert clean(tokens, strict=False) is None
    assert fp.check_fast_path(ENC, tokens, None) == ([], 1)
