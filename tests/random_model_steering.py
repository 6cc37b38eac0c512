"""How the tests steer a random-weight gpt-oss, written once for every test folder.

Teacher forcing: a forced matcher allows exactly the next id of a script, so the
random model writes the script (:class:`ForcedMatcher` for the engine tests; the
serve tests' matcher builds the same mask with :func:`only_next`). Boosting:
:class:`LikesSpecialTokens` raises the special tokens' logits, so that free
sampling still ends its messages and turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def only_next(script: Sequence[int], position: int, out: Any = None) -> Any:
    """A token mask that allows ``script[position]`` alone (nothing past the end).

    The mask is ``MASK_WORDS`` int32 words with one bit per id, as the engines read
    it; ``out`` is filled in place when given.
    """
    import numpy as np  # the engines' extra; imported when a test forces a model

    from harmonia.constrained import MASK_WORDS

    if out is None:
        out = np.zeros(MASK_WORDS, dtype=np.int32)
    out[:] = 0
    if position < len(script):
        token = script[position]
        out[token // 32] = np.int32(np.uint32(1 << (token % 32)).view(np.int32))
    return out


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
        self.mask_calls += 1
        return only_next(self.script, self.position, out)

    def consume(self, token: int) -> None:
        if self.is_finished or token != self.script[self.position]:
            raise AssertionError(f"token {token} at {self.position} is not the scripted one")
        self.position += 1

    def copy(self) -> ForcedMatcher:
        # The engines work on a copy; tests read the counters of the copy they get back.
        twin = ForcedMatcher(self.script, self.position)
        self.copies.append(twin)
        return twin


class LikesSpecialTokens:
    """The random model with its special-token logits raised, so messages and turns end.

    Without it a random model writes free text until the token limit, and the runs
    would rarely reach a tool call or an answer.
    """

    def __init__(self, model: Any, boost: float) -> None:
        self.model = model
        self.boost = boost

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def eval(self) -> LikesSpecialTokens:
        return self

    def __call__(self, **kwargs: Any) -> Any:
        out = self.model(**kwargs)
        out.logits[..., 199_998:] += self.boost
        return out
