"""Ids llama-server's stream left out, recovered exactly from the bytes it did send, or refused.

llama-server sends no chunk for a token after which its text ends inside a UTF-8
character; the next chunk's ``tokens`` holds only that chunk's own id, while its
text holds the held-back bytes too. Every chunk says how many ids were sampled
(``tokens_predicted``), so the number of left-out ids is known; which ids they
were is known only when their bytes are, and when those bytes can be written as
that many ids in exactly one way. Two things decide whether the bytes are known:

* ``content`` is JSON text, and llama-server writes bytes that are not UTF-8 as
  U+FFFD there (its JSON writer replaces them). U+FFFD is itself a vocabulary
  token (``\\ufffd`` and ``" \\ufffd"`` are ordinary ids), so reading the
  replacement as bytes ``EF BF BD`` finds a split, and a wrong one. So the
  request asks for ``n_probs`` (at least 1): each chunk's
  ``completion_probabilities`` entry then carries ``bytes``, the raw bytes of
  the chunk's text (held-back bytes included), which are exact. ``content`` is
  used only when no such entry came, and then only when the held-back part
  holds no U+FFFD.
* A special token writes no text unless the request names it in
  ``preserved_tokens``: then a left-out special id would leave no bytes behind.
  The request names harmony's named special tokens (:data:`PRESERVED`), so they
  write their text (an end id's chunk then also carries the bytes held back
  before it); a reserved id still writes nothing, so a split that needs fewer
  ids than were left out means an id of no text may be among them, and the
  recovery is refused.

Whatever cannot be recovered exactly is an error naming the position of the
first left-out id: an id is never guessed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

from .._tokenizer import special_tokens as st

#: The special ids llama-server is asked to write as text (``preserved_tokens``).
PRESERVED: Final = tuple(
    sorted(i for i in st.SPECIAL_TOKEN_TEXT if "reserved" not in st.SPECIAL_TOKEN_TEXT[i])
)
#: U+FFFD as UTF-8: what llama-server writes in ``content`` for bytes that are not UTF-8.
REPLACEMENT: Final = "\ufffd".encode()


class Unrecoverable(Exception):
    """The left-out ids cannot be known exactly; the message says why (internal)."""


def preserved_token_texts() -> list[str]:
    """The ``preserved_tokens`` of a llama-server request: the texts of :data:`PRESERVED`."""
    return [st.SPECIAL_TOKEN_TEXT[i] for i in PRESERVED]


@functools.cache
def _vocabulary() -> tuple[list[bytes], dict[bytes, int], int]:
    """Each id's bytes as llama-server writes them, the ids by their bytes, the longest."""
    from .._tokenizer import get_tokenizer

    table = list(get_tokenizer().token_bytes_table)
    written = set(PRESERVED)
    for token in range(st.FIRST_SPECIAL, len(table)):
        if token not in written:
            table[token] = b""  # a special token not preserved writes no text
    by_bytes = {piece: token for token, piece in enumerate(table) if piece}
    return table, by_bytes, max(len(piece) for piece in by_bytes)


def chunk_bytes(payload: dict[str, Any], ids: Sequence[int]) -> tuple[bytes, bool]:
    """The chunk's text as bytes, and whether they are exact (raw, not U+FFFD-replaced)."""
    probabilities = payload.get("completion_probabilities")
    if isinstance(probabilities, list) and len(probabilities) == 1 and len(ids) == 1:
        entry = probabilities[0]
        raw = entry.get("bytes") if isinstance(entry, dict) else None
        if (
            entry.get("id") == ids[0]
            and isinstance(raw, list)
            and all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw)
        ):
            return bytes(raw), True
    content = payload.get("content")
    return (content.encode("utf-8") if isinstance(content, str) else b""), False


def splits(data: bytes, count: int, by_bytes: dict[bytes, int], longest: int) -> list[list[int]]:
    """Every way (at most two are looked for) to write ``data`` as exactly ``count`` ids."""
    found: list[list[int]] = []

    @functools.cache
    def possible(position: int, left: int) -> bool:
        # Whether data[position:] can be written as exactly `left` ids (prunes the walk).
        if left == 0:
            return position == len(data)
        remaining = len(data) - position
        if remaining < left:
            return False
        return any(
            data[position:end] in by_bytes and possible(end, left - 1)
            for end in range(position + 1, min(len(data), position + longest) + 1)
        )

    def walk(position: int, left: int, ids: list[int]) -> None:
        if len(found) > 1 or not possible(position, left):
            return
        if left == 0:
            found.append(list(ids))
            return
        for end in range(position + 1, min(len(data), position + longest) + 1):
            token = by_bytes.get(data[position:end])
            if token is not None:
                ids.append(token)
                walk(end, left - 1, ids)
                ids.pop()

    walk(0, count, [])
    return found


def recover(missing: int, ids: Sequence[int], payload: dict[str, Any]) -> list[int]:
    """The ``missing`` ids sampled before this chunk's ``ids``, or :class:`Unrecoverable`."""
    data, exact = chunk_bytes(payload, ids)
    table, by_bytes, longest = _vocabulary()
    for token in reversed(ids):  # the sent ids' own text is at the end
        own = table[token] if 0 <= token < len(table) else b""
        if data.endswith(own):
            data = data[: len(data) - len(own)]
        elif st.is_special_token(token):
            continue  # a server that did not write the special token's text
        else:
            raise Unrecoverable(
                f"the chunk's text {data!r} does not end with the bytes of its id {token}"
            )
    if not exact and REPLACEMENT in data:
        raise Unrecoverable(
            f"the server sent their bytes only as text ({data!r}), where bytes that are not "
            "UTF-8 are written as U+FFFD, and no raw bytes (completion_probabilities)"
        )
    ways = splits(data, missing, by_bytes, longest)
    if len(ways) != 1:
        how = "no way" if not ways else "more than one way"
        raise Unrecoverable(f"their bytes {data!r} split into {missing} ids in {how}")
    for fewer in range(missing):
        # A special id that writes no text would leave exactly such a split behind.
        if splits(data, fewer, by_bytes, longest):
            raise Unrecoverable(
                f"their bytes {data!r} split into {fewer} ids too, so an id that writes no "
                "text (a reserved special token) may be among them"
            )
    return ways[0]
