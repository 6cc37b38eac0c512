"""Reading the JSON arguments of a browser call, with errors the model can act on."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from harmonia import ToolError

# Accepted arguments per function (gpt-oss also accepts ``top_n`` for ``topn``).
ACCEPTED: dict[str, frozenset[str]] = {
    "search": frozenset({"query", "topn", "top_n", "source"}),
    "open": frozenset({"id", "cursor", "loc", "num_lines", "view_source", "source"}),
    "find": frozenset({"pattern", "cursor"}),
}


def parse_arguments(name: str, text: str) -> dict[str, Any]:
    """The call's arguments as a dict (an empty body means no arguments)."""
    tool = f"browser.{name}"
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(
            f"The arguments of `{tool}` are not valid JSON ({e.msg} at character {e.pos}). "
            'Send a JSON object such as {"query": "..."}.',
            tool=tool,
        ) from None
    if not isinstance(value, dict):
        raise ToolError(f"The arguments of `{tool}` must be a JSON object.", tool=tool)
    unknown = sorted(set(value) - ACCEPTED[name])
    if unknown:
        valid = ", ".join(f"`{a}`" for a in sorted(ACCEPTED[name]))
        raise ToolError(
            f"Unknown argument(s) for `{tool}`: {', '.join(unknown)}. Valid arguments: {valid}.",
            tool=tool,
        )
    return value


def get_int(args: Mapping[str, Any], key: str, default: int, tool: str) -> int:
    """An integer argument; JSON numbers with no fraction (``3.0``) count as integers."""
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)  # models sometimes quote numbers
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"`{key}` must be an integer, not {json.dumps(value)}.", tool=tool)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ToolError(f"`{key}` must be an integer, not {value}.", tool=tool)
    return int(value)


def get_str(args: Mapping[str, Any], key: str, tool: str) -> str:
    """A required, non-empty string argument."""
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"`{tool}` needs `{key}`, a non-empty string.", tool=tool)
    return value
