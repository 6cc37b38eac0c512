"""Refuse tool schemas that are not JSON Schema at all, instead of rendering ``any``.

The reference converter renders whatever it does not understand as ``any``:
``{"type": "objekt", "properties": 5}`` silently becomes a tool that takes
anything, and the model is never told what the arguments are. Only shapes that
no JSON Schema draft allows are refused here (a ``type`` that is not one of the
seven type names, ``properties`` that is not an object, a subschema that is
neither an object nor a boolean, ...); every valid schema, including the
keywords the reference ignores, still renders exactly as the reference renders
it. This is a deliberate difference from the reference (see the README).

The walk is iterative, so it answers for schemas of any depth.

>>> check_schema({"type": "object", "properties": {"a": {"type": "strnig"}}}, ".parameters")
Traceback (most recent call last):
...
harmonia._errors.RenderError: schema 'type' is 'strnig', not a JSON Schema type: use one of \
'array', 'boolean', 'integer', 'null', 'number', 'object', 'string' (at \
.parameters.properties.a.type)
"""

from __future__ import annotations

from typing import Final

from .._errors import RenderError

__all__ = ["check_schema"]

TYPE_NAMES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_TYPE_LIST = ", ".join(map(repr, sorted(TYPE_NAMES)))

# Keywords whose value is one subschema, a list of them, or a map of names to them.
_ONE = ("additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions")
_WHAT: Final[dict[str, str]] = {
    **{key: "a schema (an object or a boolean)" for key in _ONE},
    **{key: "a list of schemas" for key in _MANY},
    **{key: "an object mapping names to schemas" for key in _MAP},
}


# How each keyword is checked; keywords not listed are not looked at.
_ONE_SCHEMA, _SCHEMA_LIST, _SCHEMA_MAP, _ITEMS, _TYPE, _REQUIRED, _ENUM, _REF = range(8)
_KEYWORDS: Final[dict[str, int]] = {
    **dict.fromkeys(_ONE, _ONE_SCHEMA),
    **dict.fromkeys(_MANY, _SCHEMA_LIST),
    **dict.fromkeys(_MAP, _SCHEMA_MAP),
    "items": _ITEMS,
    "type": _TYPE,
    "required": _REQUIRED,
    "enum": _ENUM,
    "$ref": _REF,
}

# A path is built only for an error: each pending schema carries its parent's
# path and its own segment (a key, or a list index), a linked list ending in the
# caller's path string.
_Path = tuple["_Path | str", "str | int"]


def check_schema(schema: object, path: str) -> None:
    """Raise :class:`RenderError` (with the path) if ``schema`` is not a JSON Schema.

    ``None`` (no parameters) and the boolean schemas are fine; ``path`` is where
    ``schema`` sits in its content, such as ``.tools.functions.tools[0].parameters``.
    """
    # Every render of a new tool list checks each schema: a quick pass without
    # paths answers for valid ones, and only a schema it doubts is walked again
    # with paths, to say where the problem is.
    if not _looks_valid(schema):
        _check_with_paths(schema, path)


def _looks_valid(schema: object) -> bool:
    """True if ``schema`` passes every check of :func:`_check_with_paths` (no paths kept)."""
    keywords = _KEYWORDS
    stack = [schema]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if type(node) is not dict:
            if isinstance(node, bool):
                continue
            if not isinstance(node, dict):
                return False
        for key, value in node.items():
            kind = keywords.get(key)
            if kind is None:
                continue
            if kind == _SCHEMA_MAP:
                if not isinstance(value, dict):
                    return False
                extend(value.values())
            elif kind == _TYPE:
                # A type name (the usual case) is accepted without a call.
                plain = type(value) is str and value in TYPE_NAMES
                if not plain and not _valid_value(_TYPE, value):
                    return False
            elif kind == _ONE_SCHEMA or (kind == _ITEMS and not isinstance(value, list)):
                push(value)
            elif kind in (_SCHEMA_LIST, _ITEMS):
                if not isinstance(value, list):
                    return False
                extend(value)
            elif kind == _REQUIRED:
                # Inline, as for "type": these two are in most object schemas.
                if not isinstance(value, list):
                    return False
                for name in value:
                    if not isinstance(name, str):
                        return False
            elif kind == _ENUM:
                if not isinstance(value, list):
                    return False
            elif not _valid_value(kind, value):
                return False
    return True


def _valid_value(kind: int, value: object) -> bool:
    try:
        _check_value(kind, value, ("", ""))
    except RenderError:
        return False
    return True


def _check_with_paths(schema: object, path: str) -> None:
    stack: list[tuple[object, _Path | str]] = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise RenderError(
                f"a schema must be an object or a boolean, not {_kind(node)}: write "
                'e.g. {"type": "string"}',
                path=_text(where),
            )
        for key, value in node.items():
            kind = _KEYWORDS.get(key)
            if kind is None:
                continue
            here = (where, key)
            if kind == _ONE_SCHEMA or (kind == _ITEMS and not isinstance(value, list)):
                stack.append((value, here))
            elif kind in (_SCHEMA_LIST, _ITEMS):
                if not isinstance(value, list):
                    raise RenderError(f"schema {key!r} must be {_WHAT[key]}", path=_text(here))
                stack.extend((item, (here, i)) for i, item in enumerate(value))
            elif kind == _SCHEMA_MAP:
                if not isinstance(value, dict):
                    raise RenderError(
                        f"schema {key!r} must be {_WHAT[key]}, not {_kind(value)}",
                        path=_text(here),
                    )
                stack.extend((item, (here, name)) for name, item in value.items())
            else:
                _check_value(kind, value, here)


def _check_value(kind: int, value: object, here: _Path) -> None:
    if kind == _TYPE:
        names = value if isinstance(value, list) else [value]
        bad = [name for name in names if not isinstance(name, str) or name not in TYPE_NAMES]
        if bad or not names:
            shown = f"{value!r}" if not names else f"{bad[0]!r}"
            raise RenderError(
                f"schema 'type' is {shown}, not a JSON Schema type: use one of {_TYPE_LIST}",
                path=_text(here),
            )
    elif kind == _REQUIRED:
        if not (isinstance(value, list) and all(isinstance(name, str) for name in value)):
            raise RenderError(
                f"schema 'required' must be a list of property names, not {value!r}",
                path=_text(here),
            )
    elif kind == _ENUM:
        if not isinstance(value, list):
            raise RenderError(
                f"schema 'enum' must be a list of values, not {_kind(value)}", path=_text(here)
            )
    elif not isinstance(value, str):  # $ref
        raise RenderError(
            f"schema '$ref' must be a string such as '#/$defs/Name', not {_kind(value)}",
            path=_text(here),
        )


def _text(path: _Path | str) -> str:
    segments = []
    while not isinstance(path, str):
        path, segment = path
        segments.append(f"[{segment}]" if isinstance(segment, int) else f".{segment}")
    return path + "".join(reversed(segments))


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"
