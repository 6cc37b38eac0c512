"""Ids for completions, output items and tool calls.

The harmony format has no place for ids: a tool call is a message to
``functions.<name>`` and its result a message from ``functions.<name>``. Ids
exist only on the API side, so they are made here:

* with a ``seed``, the n-th id of a prefix is a hash of ``(seed, prefix, n)``:
  the same seed gives the same ids, streaming or not, on every replica;
* without one, ids are random.

A good seed is the hash of the prompt tokens (:func:`seed_from_tokens`): each
turn of a conversation has a different prompt, so ids never repeat within a
conversation, and a retried request gets the same ids. Ids the client sent in
the history are never changed: they only pair tool results with their calls.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ID_CHARS = 24


def _base62(data: bytes, length: int) -> str:
    number = int.from_bytes(data, "big")
    out = []
    for _ in range(length):
        number, rem = divmod(number, 62)
        out.append(_ALPHABET[rem])
    return "".join(out)


def seed_from_tokens(tokens: Iterable[int]) -> str:
    """A seed that is a hash of token ids (e.g. the prompt: a conversation prefix).

    >>> seed_from_tokens([1, 2, 3]) == seed_from_tokens([1, 2, 3]) != seed_from_tokens([1, 2])
    True
    """
    digest = hashlib.sha256()
    for token in tokens:
        digest.update(token.to_bytes(4, "little", signed=True))
    return digest.hexdigest()[:32]


class IdGenerator:
    """Makes ids such as ``call_...``, ``chatcmpl-...``, ``msg_...``.

    >>> gen = IdGenerator(seed="abc")
    >>> a, b = gen.new("call"), gen.new("call")
    >>> a != b and a == IdGenerator(seed="abc").new("call")
    True
    >>> a.startswith("call_") and len(a) == 29
    True
    >>> IdGenerator(seed="abc").new("chatcmpl", sep="-")[:9]
    'chatcmpl-'
    """

    def __init__(self, seed: str | int | bytes | None = None) -> None:
        self._seed = seed if seed is None or isinstance(seed, bytes) else str(seed).encode()
        self._counters: dict[str, int] = {}

    @property
    def deterministic(self) -> bool:
        return self._seed is not None

    def new(self, prefix: str, *, sep: str = "_") -> str:
        """The next id with this prefix (each prefix counts on its own)."""
        n = self._counters.get(prefix, 0)
        self._counters[prefix] = n + 1
        if self._seed is None:
            raw = secrets.token_bytes(24)
        else:
            key = self._seed + b"\0" + prefix.encode() + b"\0" + str(n).encode()
            raw = hashlib.sha256(key).digest()
        return f"{prefix}{sep}{_base62(raw, _ID_CHARS)}"


def as_generator(ids: IdGenerator | str | int | bytes | None) -> IdGenerator:
    """Accept a generator, a seed, or ``None`` (random ids)."""
    return ids if isinstance(ids, IdGenerator) else IdGenerator(ids)
