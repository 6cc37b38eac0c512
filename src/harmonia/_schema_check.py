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

from collections.abc import Mapping
from types import MappingProxyType

from ._errors import RenderError

__all__ = ["check_schema"]

TYPE_NAMES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_TYPE_LIST = ", ".join(map(repr, sorted(TYPE_NAMES)))

# Keywords whose value is one subschema, a list of them, or a map of names to them.
_ONE = ("additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions")
_WHAT: Mapping[str, str] = MappingProxyType(
    {
        **{key: "a schema (an object or a boolean)" for key in _ONE},
        **{key: "a list of schemas" for key in _MANY},
        **{key: "an object mapping names to schemas" for key in _MAP},
    }
)


def check_schema(schema: object, path: str) -> None:
    """Raise :class:`RenderError` (with the path) if ``schema`` is not a JSON Schema.

    ``None`` (no parameters) and the boolean schemas are fine; ``path`` is where
    ``schema`` sits in its content, such as ``.tools.functions.tools[0].parameters``.
    """
    stack: list[tuple[object, str]] = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise RenderError(
                f"a schema must be an object or a boolean, not {_kind(node)}: write "
                'e.g. {"type": "string"}',
                path=where,
            )
        _check_keywords(node, where)
        stack.extend(reversed(list(_subschemas(node, where))))


def _check_keywords(schema: dict[object, object], where: str) -> None:
    kind = schema.get("type")
    if "type" in schema:
        names = kind if isinstance(kind, list) else [kind]
        bad = [name for name in names if not isinstance(name, str) or name not in TYPE_NAMES]
        if bad or not names:
            shown = f"{kind!r}" if not names else f"{bad[0]!r}"
            raise RenderError(
                f"schema 'type' is {shown}, not a JSON Schema type: use one of {_TYPE_LIST}",
                path=f"{where}.type",
            )
    required = schema.get("required")
    if "required" in schema and not (
        isinstance(required, list) and all(isinstance(name, str) for name in required)
    ):
        raise RenderError(
            f"schema 'required' must be a list of property names, not {required!r}",
            path=f"{where}.required",
        )
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise RenderError(
            f"schema 'enum' must be a list of values, not {_kind(schema['enum'])}",
            path=f"{where}.enum",
        )
    if "$ref" in schema and not isinstance(schema["$ref"], str):
        raise RenderError(
            f"schema '$ref' must be a string such as '#/$defs/Name', not {_kind(schema['$ref'])}",
            path=f"{where}.$ref",
        )


def _subschemas(schema: dict[object, object], where: str) -> list[tuple[object, str]]:
    out: list[tuple[object, str]] = []
    for key in (*_ONE, *_MANY, *_MAP, "items"):
        if key not in schema:
            continue
        value = schema[key]
        here = f"{where}.{key}"
        if key in _ONE or (key == "items" and not isinstance(value, list)):
            out.append((value, here))
        elif key in _MANY or key == "items":
            if not isinstance(value, list):
                raise RenderError(f"schema {key!r} must be {_WHAT[key]}", path=here)
            out.extend((item, f"{here}[{i}]") for i, item in enumerate(value))
        else:
            if not isinstance(value, dict):
                raise RenderError(
                    f"schema {key!r} must be {_WHAT[key]}, not {_kind(value)}", path=here
                )
            out.extend((item, f"{here}.{name}") for name, item in value.items())
    return out


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"
