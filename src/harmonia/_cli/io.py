"""Input helpers for the command line: reading files and JSON.

Every problem with an input becomes an :class:`InputError` whose text names the
file (or standard input), what is wrong and how to fix it, so the command can
print it as one line.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final, Literal, get_args

from .._errors import InputError
from .._files import describe, not_utf8, read_text_file

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
    text = read_input(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{describe(path)} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
