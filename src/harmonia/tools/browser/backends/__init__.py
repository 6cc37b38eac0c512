"""Where the browser's searches and pages come from: a local corpus, or a web search API."""

from ._base import Backend
from ._local import IndexStats, LocalCorpusBackend, fts5_available
from ._web import ExaBackend, YouComBackend

__all__ = [
    "Backend",
    "ExaBackend",
    "IndexStats",
    "LocalCorpusBackend",
    "YouComBackend",
    "fts5_available",
]
