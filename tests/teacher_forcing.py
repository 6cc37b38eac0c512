"""The mask of teacher forcing, shared by the engine tests' and the serve tests' matchers.

A forced matcher allows exactly the next id of a script, so a random model writes
the script; both folders' matchers build that mask here.
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
