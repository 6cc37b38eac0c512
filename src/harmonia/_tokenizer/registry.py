"""The engine registry: which BPE engine encodes, by name, built once per process.

The engines (:data:`~harmonia._names.ENGINE_NAMES`) are described where users
choose one, :func:`harmonia.load_harmony_encoding`. Each is built once per
process, under a lock, on first use.
"""

from __future__ import annotations

import os
import threading
from typing import Final

from .._errors import VocabularyError, check_choice
from .._names import ENGINE_NAMES, EngineName
from .auto_engine import BpeEngine, TieredEngine
from .engines import QuicktokEngine, TiktokenEngine
from .python_engine import PythonBpe
from .vocab_file import ordinary_ranks, unicode_classes

#: Engine chosen when none is named; ``HARMONIA_BPE_ENGINE`` overrides it.
DEFAULT_ENGINE: Final[EngineName] = "auto"
ENGINE_ENV_VAR: Final = "HARMONIA_BPE_ENGINE"
ENGINES: Final = ENGINE_NAMES

_engines_lock = threading.RLock()  # held while an engine is built; auto may build quicktok
_engines: dict[str, BpeEngine] = {}


def _build(name: str) -> BpeEngine:
    if name == "tiktoken":
        return TiktokenEngine(ordinary_ranks())
    try:
        classes = unicode_classes()
    except VocabularyError:
        if name == "python":
            raise
        # quicktok can still load its own copy; auto without the table is quicktok at once.
        return QuicktokEngine(None, None) if name == "quicktok" else get_engine("quicktok")
    if name == "quicktok":
        return QuicktokEngine(classes, lambda: get_engine("python"))
    python = PythonBpe(ordinary_ranks(), classes)
    if name == "python":
        return python
    tiered = TieredEngine(python, lambda: get_engine("quicktok"))
    # Long pieces go straight to quicktok (the Python merge is slow on them).
    python.long_piece_delegate = tiered.encode_long_piece
    return tiered


def get_engine(name: EngineName | str | None = None) -> BpeEngine:
    """The process-wide engine called ``name`` (default: env var, then :data:`DEFAULT_ENGINE`).

    A plain ``str`` is accepted because names also come from the environment; an
    unknown one raises :class:`VocabularyError` naming the valid ones."""
    if name is None:
        name = os.environ.get(ENGINE_ENV_VAR) or DEFAULT_ENGINE
    engine = _engines.get(name)
    if engine is not None:
        return engine
    hint = f" (argument engine= or the {ENGINE_ENV_VAR} environment variable)"
    check_choice(name, ENGINES, "BPE engine", error=VocabularyError, hint=hint)
    with _engines_lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _engines[name] = _build(name)
    return engine
