"""What the parser's property tests share: the encoding, hypothesis settings, the fuzz tool.

A plain module (imported as ``parse_support``: pytest puts this folder on
``sys.path``). ``fp`` is ``tools/fuzz_parse.py``, whose checks the property tests
run over inputs that hypothesis searches and shrinks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

import harmonia as h

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
import fuzz_parse as fp

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
#: ``HARMONIA_PARSER_EXAMPLES`` raises the examples per property for a longer search.
SETTINGS = settings(
    max_examples=int(os.environ.get("HARMONIA_PARSER_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

__all__ = ["ENC", "SETTINGS", "fp"]
