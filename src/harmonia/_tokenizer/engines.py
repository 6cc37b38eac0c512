"""Adapters that make third-party BPE packages into harmonia engines.

quicktok (a hard dependency) and tiktoken (the ``tiktoken`` extra) each get a
class with the :class:`~.auto_engine.BpeEngine` shape; the pure-Python encoder is
:mod:`.python_engine` and the default engine :mod:`.auto_engine`. Which one runs
is decided in :mod:`.registry`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

from .._errors import VocabularyError, install_hint
from .auto_engine import BpeEngine
from .python_engine import UnicodeClasses
from .vocab_file import import_quicktok, write_quicktok_data

#: o200k_base's pre-tokenisation pattern (a published constant of the encoding).
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


class QuicktokEngine:
    """quicktok, made to split text exactly as the reference does.

    Two differences are closed: quicktok's class table is newer Unicode than the
    reference's, so it is built from a data directory holding the reference's
    classes (``unicode_classes()``) beside quicktok's own vocabulary; and quicktok
    matches the ``'s`` contraction in ASCII only, where the reference folds case
    the Unicode way (``'ſ``, long s, counts), so the rare text holding ``'ſ`` is
    encoded by the pure-Python encoder, which follows the reference there.
    """

    name = "quicktok"

    def __init__(
        self, classes: UnicodeClasses | None, python: Callable[[], BpeEngine] | None
    ) -> None:
        """Without ``classes`` (their file unreadable) quicktok uses its bundled files
        as they are; without ``python`` no text is sent to Python."""
        quicktok = import_quicktok()
        try:
            if classes is None:
                tok = quicktok.get_encoding("o200k_base")
            else:
                with tempfile.TemporaryDirectory(prefix="harmonia-quicktok-") as directory:
                    write_quicktok_data(directory, classes)
                    # quicktok reads the files while it builds: the directory can go.
                    tok = quicktok.Tokenizer("o200k_base", directory)
        except (OSError, RuntimeError) as exc:
            raise VocabularyError(f"quicktok could not load o200k_base: {exc}") from exc
        # o200k_base, not quicktok's o200k_harmony: harmonia handles every special
        # token itself, so only the ordinary ranks are used.
        self._quick: Callable[[str], list[int]] = tok.encode_ordinary
        self._python = python
        self.token_bytes: Callable[[int], bytes] = tok.decode_single_token_bytes

    def encode_ordinary(self, text: str) -> list[int]:
        # ``in`` raises TypeError for what is not text, as quicktok would.
        if "\u017f" in text and "'\u017f" in text and self._python is not None:
            return self._python().encode_ordinary(text)
        return self._quick(text)


class TiktokenEngine:
    """tiktoken, built from the bundled ranks and o200k's pattern (needs the extra)."""

    name = "tiktoken"

    def __init__(self, ranks: list[bytes]) -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise VocabularyError(
                "the tiktoken engine was selected but tiktoken is not installed: "
                f"{install_hint('tiktoken')} (or unset HARMONIA_BPE_ENGINE)"
            ) from exc
        self._ranks = ranks
        self._enc = tiktoken.Encoding(
            name="o200k_base_harmonia",
            pat_str=O200K_PATTERN,
            mergeable_ranks={b: i for i, b in enumerate(ranks)},
            special_tokens={},
        )
        self.encode_ordinary: Callable[[str], list[int]] = self._enc.encode_ordinary

    def token_bytes(self, rank: int) -> bytes:
        return self._ranks[rank]
