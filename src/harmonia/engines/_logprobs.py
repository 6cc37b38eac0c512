"""Reading the log-probabilities remote servers stream, into :class:`TokenLogprob` s.

Three shapes reach harmonia, all keyed by token id (never by token text, which
is ambiguous: several ids can spell the same bytes):

* llama.cpp's ``completion_probabilities`` entries: ``{"id", "logprob",
  "top_logprobs": [{"id", "logprob", ...}]}`` (``n_probs`` without
  ``post_sampling_probs``);
* vLLM's ``/inference/v1/generate`` ``logprobs.content`` entries:
  ``{"token_id", "logprob", "top_logprobs": [{"token_id", "logprob"}]}`` (older
  releases spell the id as the text ``"token_id:N"`` in ``token``);
* vLLM's ``/v1/completions`` ``logprobs`` object: parallel lists ``tokens``,
  ``token_logprobs`` and ``top_logprobs`` (dicts from ``"token_id:N"`` to a
  logprob, with ``return_tokens_as_token_ids``).

Servers send the sampled id among the alternatives, and sometimes more
alternatives than asked; :func:`top_pairs` sorts, de-duplicates and cuts them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ._base import TokenLogprob

_TOKEN_ID: Final = re.compile(r"token_id:(\d+)")


class MalformedLogprobs(ValueError):
    """The server's log-probabilities cannot be read (the message says what is wrong)."""


def _id(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        match = _TOKEN_ID.fullmatch(value)
        if match:
            return int(match.group(1))
    return None


def _number(value: Any) -> float:
    """A logprob; JSON has no -inf, so servers send a very negative number (or null)."""
    if value is None:
        return -math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise MalformedLogprobs(f"a log-probability is {value!r}, not a number")
    return float(value)


def entry_id(entry: Mapping[str, Any]) -> int | None:
    """The token id of one entry, from ``id``, ``token_id`` or ``"token_id:N"`` text."""
    for key in ("id", "token_id", "token"):
        token = _id(entry.get(key))
        if token is not None:
            return token
    return None


def top_pairs(candidates: Iterable[tuple[int, float]], n: int) -> tuple[tuple[int, float], ...]:
    """The ``n`` most likely ``(id, logprob)`` pairs, most likely first, each id once."""
    best: dict[int, float] = {}
    for token, logprob in candidates:
        if token not in best or logprob > best[token]:
            best[token] = logprob
    ranked = sorted(best.items(), key=lambda pair: (-pair[1], pair[0]))
    return tuple(ranked[:n])


def from_entry(entry: Any, n: int) -> TokenLogprob:
    """One llama.cpp or vLLM-generate entry as a :class:`TokenLogprob` with ``n`` alternatives."""
    if not isinstance(entry, Mapping):
        raise MalformedLogprobs(f"a log-probability entry is {entry!r}, not an object")
    token = entry_id(entry)
    if token is None:
        raise MalformedLogprobs(f"a log-probability entry names no token id: {entry!r}")
    top = entry.get("top_logprobs") or []
    if not isinstance(top, list):
        raise MalformedLogprobs(f"top_logprobs is {top!r}, not a list")
    pairs: list[tuple[int, float]] = []
    for alternative in top:
        if not isinstance(alternative, Mapping) or entry_id(alternative) is None:
            raise MalformedLogprobs(f"an alternative names no token id: {alternative!r}")
        pairs.append((entry_id(alternative) or 0, _number(alternative.get("logprob"))))
    return TokenLogprob(token, _number(entry.get("logprob")), top_pairs(pairs, n))


def from_completions(logprobs: Any, n: int) -> list[TokenLogprob]:
    """vLLM's ``/v1/completions`` ``logprobs`` object (token ids as ``"token_id:N"``)."""
    if not isinstance(logprobs, Mapping):
        raise MalformedLogprobs(f"logprobs is {logprobs!r}, not an object")
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    if not (isinstance(tokens, list) and isinstance(values, list) and isinstance(tops, list)):
        raise MalformedLogprobs(f"logprobs lists are malformed: {logprobs!r}")
    if not len(tokens) == len(values) == len(tops):
        raise MalformedLogprobs(
            f"logprobs has {len(tokens)} tokens, {len(values)} token_logprobs and "
            f"{len(tops)} top_logprobs"
        )
    out: list[TokenLogprob] = []
    for text, value, top in zip(tokens, values, tops, strict=True):
        token = _id(text)
        if token is None:
            raise MalformedLogprobs(
                f"a token is {text!r}, not 'token_id:N' (the request sets "
                "return_tokens_as_token_ids)"
            )
        pairs: list[tuple[int, float]] = []
        if top is not None:
            if not isinstance(top, Mapping):
                raise MalformedLogprobs(f"a top_logprobs entry is {top!r}, not an object")
            for key, logprob in top.items():
                alternative = _id(key)
                if alternative is None:
                    raise MalformedLogprobs(f"an alternative is {key!r}, not 'token_id:N'")
                pairs.append((alternative, _number(logprob)))
        out.append(TokenLogprob(token, _number(value), top_pairs(pairs, n)))
    return out
