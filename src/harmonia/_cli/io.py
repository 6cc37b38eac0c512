"""Input helpers for the command line: reading files and JSON.

Every problem with an input becomes an :class:`InputError` whose text names the
file (or standard input), what is wrong and how to fix it, so the command can
print it as one line.
"""

from __future__ import annotations

import sys
from typing import Any, Final, Literal, get_args

from .._errors import InputError
from .._files import not_utf8, parse_json, read_text_file

InputFormat = Literal["auto", "harmony", "chat"]
INPUT_FORMATS: Final[tuple[InputFormat, ...]] = get_args(InputFormat)


def read_input(path: str) -> str:
    """The text of ``path``, or of standard input for ``-``."""
    if path != "-":
        return read_text_file(path)
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as exc:
        raise InputError(not_utf8(path, exc)) from None


def read_json(path: str) -> Any:
    return parse_json(read_input(path), path)
