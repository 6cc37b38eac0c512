"""o200k's character classes as the reference sees them (Unicode 16.0).

The reference splits text with Rust's regex-syntax 0.8.5, whose tables are
Unicode 16.0. quicktok-v1 0.4's class table was exported from a newer Unicode
(17.0), which assigned about 4,700 more code points (CJK Extension J, Tangut
components, several new scripts and marks) and made U+0295 a letter of class Lo.
For those code points the two disagree on a class of o200k's pattern, and so can
their token ids. These are the code points where quicktok's table differs from
Unicode 16.0, each with its Unicode 16.0 signature (bits of :mod:`.python_engine`).

Facts, not code: derived by classifying every code point with the ``regex``
module 2024.11.6 (Unicode 16.0) and comparing with quicktok's table, then checked
against openai_harmony 0.0.8 itself on every code point (see
tests/tokenizer/test_python_engine_reference.py, which repeats the check whenever
the reference is installed).
"""

from __future__ import annotations

from .python_engine import LETTER, LOWER

UNASSIGNED = 0

#: (first, last, signature) for inclusive code point ranges, sorted, disjoint.
UNICODE_16_OVERRIDES: tuple[tuple[int, int, int], ...] = (
    (0x00295, 0x00295, LETTER | LOWER),
    (0x0088F, 0x0088F, UNASSIGNED),
    (0x00C5C, 0x00C5C, UNASSIGNED),
    (0x00CDC, 0x00CDC, UNASSIGNED),
    (0x01ACF, 0x01ADD, UNASSIGNED),
    (0x01AE0, 0x01AEB, UNASSIGNED),
    (0x0A7CE, 0x0A7CF, UNASSIGNED),
    (0x0A7D2, 0x0A7D2, UNASSIGNED),
    (0x0A7D4, 0x0A7D4, UNASSIGNED),
    (0x0A7F1, 0x0A7F1, UNASSIGNED),
    (0x10940, 0x10959, UNASSIGNED),
    (0x10EC5, 0x10EC7, UNASSIGNED),
    (0x10EFA, 0x10EFB, UNASSIGNED),
    (0x11B60, 0x11B67, UNASSIGNED),
    (0x11DB0, 0x11DDB, UNASSIGNED),
    (0x11DE0, 0x11DE9, UNASSIGNED),
    (0x16EA0, 0x16EB8, UNASSIGNED),
    (0x16EBB, 0x16ED3, UNASSIGNED),
    (0x16FF2, 0x16FF6, UNASSIGNED),
    (0x187F8, 0x187FF, UNASSIGNED),
    (0x18D09, 0x18D1E, UNASSIGNED),
    (0x18D80, 0x18DF2, UNASSIGNED),
    (0x1E6C0, 0x1E6DE, UNASSIGNED),
    (0x1E6E0, 0x1E6F5, UNASSIGNED),
    (0x1E6FE, 0x1E6FF, UNASSIGNED),
    (0x2B73A, 0x2B73F, UNASSIGNED),
    (0x2CEA2, 0x2CEAD, UNASSIGNED),
    (0x323B0, 0x33479, UNASSIGNED),
)
