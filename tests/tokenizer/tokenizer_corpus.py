"""A varied text corpus for the tokenizer and engine tests.

Imported by name (``from tokenizer_corpus import varied_corpus``): pytest's
prepend import mode puts each test file's folder first on ``sys.path`` (there is
no ``tests/__init__.py``); the name is unique across tests/ and it is not
collected as a test file.
"""

from __future__ import annotations

import random
from pathlib import Path

import harmonia

SPEC = Path(__file__).parent.parent / "golden" / "guide"


def varied_corpus() -> list[str]:
    rng = random.Random(7)
    texts = [p.read_text(encoding="utf-8") for p in sorted(SPEC.glob("*.txt"))]
    texts.append(Path(harmonia.__file__).read_text(encoding="utf-8"))
    alphabet = (
        "abcXYZ019 \t\n\r  .,;:'\"!?-_/\\()[]{}<>|=+*&^%$#@~`"
        "éüßøçñ日本語中文한국어русскийعربيहिन्दी😀👍🏽🧑‍💻\u00a0\u2028\u200d"
    )
    for _ in range(400):
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))))
    words = ["don't", "I'LL", "we've", "123456789", "  leading", "trailing  ", "\n\n\n", "x" * 500]
    texts += words
    return texts
