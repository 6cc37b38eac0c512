"""Shared fixtures for the engine tests: the tiny random gpt-oss, forced matchers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

#: The real gpt-oss vocabulary size (logits per step).
GPT_OSS_VOCAB = 201_088


class ForcedMatcher:
    """A matcher that allows exactly the next id of a script: teacher forcing.

    It also records when each mask was asked for (one call per decoding step)
    so tests can count the steps an engine ran.
    """

    def __init__(self, script: Sequence[int], position: int = 0) -> None:
        self.script = tuple(script)
        self.position = position
        self.mask_calls = 0
        self.copies: list[ForcedMatcher] = []

    @property
    def is_finished(self) -> bool:
        return self.position >= len(self.script)

    def fill_mask(self, out: Any = None) -> Any:
        from harmonia.constrained import MASK_WORDS

        self.mask_calls += 1
        if out is None:
            out = np.zeros(MASK_WORDS, dtype=np.int32)
        out[:] = 0
        if not self.is_finished:
            token = self.script[self.position]
            out[token // 32] = np.int32(np.uint32(1 << (token % 32)).view(np.int32))
        return out

    def consume(self, token: int) -> None:
        if self.is_finished or token != self.script[self.position]:
            raise AssertionError(f"token {token} at {self.position} is not the scripted one")
        self.position += 1

    def copy(self) -> ForcedMatcher:
        # The engines work on a copy; tests read the counters of the copy they get back.
        twin = ForcedMatcher(self.script, self.position)
        self.copies.append(twin)
        return twin


@pytest.fixture(scope="session")
def forced_matcher() -> type[ForcedMatcher]:
    """The teacher-forcing matcher class (a fixture, so tests need not import conftest)."""
    return ForcedMatcher


@pytest.fixture(scope="session")
def torch_modules() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (harmonia[transformers])"
    )
    return torch, transformers


@pytest.fixture(scope="session")
def gptoss_model(torch_modules: tuple[Any, Any]) -> Any:
    """A randomly initialised gpt-oss: real vocabulary, 2 layers, hidden 64, 4 experts."""
    torch, transformers = torch_modules
    torch.manual_seed(0)
    config = transformers.GptOssConfig(
        vocab_size=GPT_OSS_VOCAB,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=128,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=199_999,
        eos_token_id=200_002,
    )
    return transformers.GptOssForCausalLM(config).eval()


@pytest.fixture(scope="session")
def transformers_engine(gptoss_model: Any) -> Any:
    from harmonia.engines.transformers import TransformersEngine

    return TransformersEngine(gptoss_model)
