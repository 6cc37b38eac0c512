"""Properties over random and mutated renderings: the checks of ``tools/fuzz_parse.py``.

Strict mode raises only ``HarmonyError`` subclasses; lenient mode never raises
and loses no text; batch parsing, streaming and the event API agree. The tool
runs the same :func:`check` over millions of inputs; here hypothesis searches
and shrinks.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from parse_support import ENC, SETTINGS, fp

import harmonia as h
from harmonia import Role

token_ids = st.one_of(
    st.sampled_from(fp.ODD_TOKENS),
    st.sampled_from(fp.FORMAT),
    st.integers(0, 201088),
    st.sampled_from([201089, 250000, 2**32 - 1, -1, -7]),
)
renderings = st.lists(
    st.randoms(use_true_random=False).map(fp.random_message), min_size=1, max_size=3
).map(lambda msgs: [t for m in msgs for t in ENC.render(m)])
# (what, where, token): delete, insert, insert a word, duplicate, swap, cut off
mutations = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 10_000), token_ids, st.sampled_from(fp.WORDS)),
    max_size=4,
)


def mutate(tokens: list[int], what: int, where: int, token: int, word: str) -> list[int]:
    i = where % (len(tokens) + 1)
    if what == 0 and i < len(tokens):
        return tokens[:i] + tokens[i + 1 :]
    if what == 1:
        return [*tokens[:i], token, *tokens[i:]]
    if what == 2:
        return [*tokens[:i], *ENC.encode(word, allowed_special="all"), *tokens[i:]]
    if what == 3 and i < len(tokens):
        return [*tokens[: i + 1], *tokens[i:]]
    if what == 4 and i + 1 < len(tokens):
        return [*tokens[:i], tokens[i + 1], tokens[i], *tokens[i + 2 :]]
    return tokens[:i]


def as_completion(tokens: list[int], role: Role | None) -> tuple[list[int], Role | None]:
    """With a role, the prompt ended with ``<|start|>assistant`` (dropped when present)."""
    if role is not None and tokens[:2] == [fp.START, 173781]:
        return tokens[2:], role
    return tokens, role


@SETTINGS
@given(st.lists(token_ids, max_size=40), st.sampled_from([None, Role.ASSISTANT]))
def test_random_streams(tokens: list[int], role: Role | None) -> None:
    assert fp.check(ENC, tokens, role) == []


@SETTINGS
@given(renderings, mutations, st.sampled_from([None, Role.ASSISTANT]))
def test_mutated_renderings(
    tokens: list[int], ops: list[tuple[int, int, int, str]], role: Role | None
) -> None:
    tokens, role = as_completion(tokens, role)
    for op in ops:
        tokens = mutate(tokens, *op)
    assert fp.check(ENC, tokens, role) == []


def test_the_checks_can_fail() -> None:
    """The checker sees lost text (a stand-in parser result that drops a word)."""
    tokens = ENC.encode("<|channel|>final<|message|>hello world<|end|>", allowed_special="all")
    words = fp.input_words(ENC.tokenizer.token_bytes_table, tokens)
    assert words == ["final", "hello", "world"]
    kept = fp.haystack([h.Message.from_role_and_content(Role.ASSISTANT, "hello")], ())
    assert [w for w in words if w not in kept] == ["final", "world"]
