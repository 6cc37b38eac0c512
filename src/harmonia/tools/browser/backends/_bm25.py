"""A pure-Python BM25 index, for a ``sqlite3`` built without FTS5.

It ranks the same way as the FTS5 path (BM25 per field, title weighted) but
without stemming, and keeps the tokenized corpus in memory: fine for a few
thousand documents, slower to start than FTS5 on large corpora.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"\w+")
# FTS5's unicode61 reads a run of Han or kana as one token (no spaces between words),
# so a word inside it could never match: each such character is indexed on its own
# and a query word becomes the phrase of its characters. Both rankings split them.
_CJK = re.compile("([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")
K1 = 1.2
B = 0.75


def segment(text: str) -> str:
    """Text as the index sees it: Han and kana characters set apart by spaces."""
    return _CJK.sub(r" \1 ", text)


def terms(text: str) -> list[str]:
    """Lower-cased words with diacritics removed (``Café`` -> ``cafe``); Han and kana one by one."""
    folded = unicodedata.normalize("NFKD", segment(text.casefold()))
    return _WORD.findall("".join(c for c in folded if not unicodedata.combining(c)))


@dataclass(slots=True)
class _Field:
    counts: list[Counter[str]]
    lengths: list[int]
    average: float
    frequency: Counter[str]

    @classmethod
    def build(cls, texts: list[str]) -> _Field:
        counts = [Counter(terms(t)) for t in texts]
        lengths = [sum(c.values()) for c in counts]
        frequency: Counter[str] = Counter()
        for c in counts:
            frequency.update(c.keys())
        return cls(counts, lengths, (sum(lengths) / len(lengths)) if lengths else 0.0, frequency)

    def score(self, doc: int, query: list[str], total: int) -> float:
        counts, length, score = self.counts[doc], self.lengths[doc], 0.0
        for term in query:
            tf = counts.get(term, 0)
            if not tf:
                continue
            df = self.frequency[term]
            idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
            norm = K1 * (1 - B + B * length / (self.average or 1.0))
            score += idf * tf * (K1 + 1) / (tf + norm)
        return score


class PythonBM25:
    """Documents ``(key, title, body)`` ranked by ``title_weight * BM25(title) + BM25(body)``."""

    def __init__(self, docs: Iterable[tuple[str, str, str]], title_weight: float) -> None:
        rows = list(docs)
        self.keys = [r[0] for r in rows]
        self.bodies = [r[2] for r in rows]
        self.title = _Field.build([r[1] for r in rows])
        self.body = _Field.build(self.bodies)
        self.title_weight = title_weight

    def search(self, query: str, topn: int) -> list[tuple[str, str]]:
        """The best ``topn`` ``(key, snippet)`` pairs, ties broken by key."""
        wanted = list(dict.fromkeys(terms(query)))
        total = len(self.keys)
        scored = []
        for doc in range(total):
            score = self.title_weight * self.title.score(doc, wanted, total)
            score += self.body.score(doc, wanted, total)
            if score > 0:
                scored.append((-score, self.keys[doc], doc))
        scored.sort()
        return [(key, self._snippet(doc, wanted)) for _, key, doc in scored[: max(0, topn)]]

    def _snippet(self, doc: int, wanted: list[str], size: int = 24) -> str:
        words = self.bodies[doc].split()
        hits = [i for i, w in enumerate(words) if set(terms(w)) & set(wanted)]
        start = max(0, hits[0] - size // 3) if hits else 0
        snippet = " ".join(words[start : start + size])
        return ("…" if start else "") + snippet + ("…" if start + size < len(words) else "")
