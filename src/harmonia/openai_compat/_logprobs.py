"""Log-probabilities in OpenAI's shape: ``{token, logprob, bytes, top_logprobs}``.

Engines give a log-probability per sampled id (``harmonia.engines.TokenLogprob``,
which this layer reads by its shape: ``token``, ``logprob``, ``top``). Only the
ids of visible text (Chat ``content``, Responses ``output_text``) are reported,
as OpenAI does: reasoning, tool-call arguments and harmony's special tokens are
not. A token's ``token`` is its bytes decoded as UTF-8 with errors replaced (a
character split across ids shows as U+FFFD in each), ``bytes`` the raw bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Protocol

from .._encoding import HarmonyEncoding
from ._common import JsonDict

#: What OpenAI sends for "very unlikely" (JSON has no -inf).
FLOOR: Final = -9999.0


class LogprobLike(Protocol):
    """One sampled id's log-probability and its most likely alternatives."""

    @property
    def token(self) -> int: ...

    @property
    def logprob(self) -> float: ...

    @property
    def top(self) -> Sequence[tuple[int, float]]: ...


def _value(logprob: float) -> float:
    return FLOOR if math.isinf(logprob) or logprob < FLOOR else logprob


def token_json(encoding: HarmonyEncoding, token: int, logprob: float) -> JsonDict:
    """``{token, logprob, bytes}`` for one id."""
    try:
        raw = encoding.decode_bytes([token])
    except Exception:  # an id outside the vocabulary (a broken engine): no text for it
        raw = b""
    return {"token": raw.decode("utf-8", "replace"), "logprob": _value(logprob), "bytes": list(raw)}


def logprob_json(encoding: HarmonyEncoding, logprob: LogprobLike) -> JsonDict:
    """One sampled id as an OpenAI log-probability entry, with its ``top_logprobs``."""
    entry = token_json(encoding, logprob.token, logprob.logprob)
    entry["top_logprobs"] = [token_json(encoding, t, value) for t, value in logprob.top]
    return entry
