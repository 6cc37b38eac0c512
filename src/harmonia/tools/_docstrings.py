"""The summary and the parameter descriptions of a docstring (Google, NumPy or reST style).

Only what a tool declaration needs: the text before the first section becomes
the function's description, and each documented parameter its description.
"""

from __future__ import annotations

import inspect
import re

_GOOGLE_ARGS = re.compile(r"^(Args|Arguments|Parameters|Params|Keyword Args):\s*$")
_GOOGLE_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_UNDERLINE = re.compile(r"^-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(:.*)?$")
_REST_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")
_REST_FIELD = re.compile(r"^:\w+")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` from a docstring.

    >>> parse_docstring('''Add two numbers.
    ...
    ...     Args:
    ...         a: The first.
    ...         b (int): The second,
    ...             continued.
    ...     ''')
    ('Add two numbers.', {'a': 'The first.', 'b': 'The second, continued.'})
    >>> parse_docstring(":param x: An x.\\n:returns: nothing")
    ('', {'x': 'An x.'})
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if _GOOGLE_ARGS.match(stripped):
            i = _google(lines, i + 1, params)
            continue
        if _underlined(lines, i):
            numpy_params = stripped in ("Parameters", "Other Parameters")
            i = _numpy(lines, i + 2, params) if numpy_params else _skip_section(lines, i + 2)
            continue
        if _REST_FIELD.match(stripped):
            i = _rest(lines, i, params)
            continue
        if _GOOGLE_SECTION.match(stripped) and stripped[:-1] in _OTHER_SECTIONS:
            i = _skip_indented(lines, i + 1)
            continue
        summary.append(line)
        i += 1
    return "\n".join(summary).strip(), params


_OTHER_SECTIONS = {
    "Returns", "Return", "Yields", "Raises", "Examples", "Example", "Notes", "Note",
    "See Also", "References", "Attributes", "Warnings", "Warning", "Todo",
}  # fmt: skip


def _underlined(lines: list[str], i: int) -> bool:
    """Whether line ``i`` is a NumPy section title (the next line is ``---``)."""
    return i + 1 < len(lines) and _NUMPY_UNDERLINE.match(lines[i + 1].strip()) is not None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    base: int | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if _indent(line) == 0:
            break
        if base is None:
            base = _indent(line)
        match = _GOOGLE_ITEM.match(line.strip())
        if _indent(line) == base and match:
            current = match.group(1).lstrip("*")
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i


def _numpy(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if _underlined(lines, i):
            break
        if not line.strip():
            i += 1
            continue
        match = _NUMPY_ITEM.match(line)
        if _indent(line) == 0 and match:
            current = match.group(1)
            params[current] = ""
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
        i += 1
    return i


def _skip_section(lines: list[str], i: int) -> int:
    while i < len(lines) and not _underlined(lines, i):
        i += 1
    return i


def _rest(lines: list[str], i: int, params: dict[str, str]) -> int:
    current: str | None = None
    while i < len(lines):
        stripped = lines[i].strip()
        match = _REST_PARAM.match(stripped)
        if match:
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif _REST_FIELD.match(stripped):
            current = None
        elif stripped and current is not None:
            params[current] = (params[current] + " " + stripped).strip()
        elif not stripped:
            current = None
        i += 1
    return i


def _skip_indented(lines: list[str], i: int) -> int:
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > 0):
        i += 1
    return i
