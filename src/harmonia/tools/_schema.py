"""Python annotations to JSON schemas that render well in harmony, and schemas tidied for harmony.

The developer message shows a function's schema as TypeScript, and the
reference renderer understands ``type`` (a string or a list), ``enum``,
``items``, ``properties``, ``oneOf``, ``nullable`` and ``default``; not
``anyOf``, ``$ref`` or ``title``. So ``Optional[int]`` becomes
``{"type": ["integer", "null"]}``, a union of objects ``oneOf``, an optional
object ``nullable``; :func:`harmonize_schema` rewrites a pydantic or MCP schema
into the same vocabulary. Validation reads these spellings correctly through
:func:`harmonia.tools._arguments.validation_schema`.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from .. import InputError

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARRAYS = {list, set, frozenset, typing.List, typing.Set, typing.FrozenSet}  # noqa: UP006
_SEQUENCE_ORIGINS = {list, set, frozenset}
_MAX_DEPTH = 12  # recursive dataclasses/TypedDicts stop being described here

try:  # Python 3.11+; typing_extensions carries them for 3.10 (pydantic installs it)
    _REQUIRED_WRAPPERS: tuple[Any, ...] = (typing.Required, typing.NotRequired)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - Python 3.10
    try:
        import typing_extensions

        _REQUIRED_WRAPPERS = (typing_extensions.Required, typing_extensions.NotRequired)
    except ImportError:
        _REQUIRED_WRAPPERS = ()


def schema_for(annotation: Any, *, where: str = "value", _depth: int = 0) -> dict[str, Any]:
    """The JSON schema of a Python annotation.

    >>> schema_for(list[int])
    {'type': 'array', 'items': {'type': 'integer'}}
    >>> schema_for(Literal["c", "f"] | None)
    {'type': ['string', 'null'], 'enum': ['c', 'f', None]}
    """
    if _depth > _MAX_DEPTH:
        return {}
    depth = _depth + 1
    if annotation is Any or annotation is object or annotation is typing.Any:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        out = schema_for(args[0], where=where, _depth=depth)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            out["description"] = notes[0]
        return out
    if origin in _REQUIRED_WRAPPERS:
        return schema_for(args[0], where=where, _depth=depth)
    if origin is Literal:
        return _enum_schema(list(args))
    if origin is Union or origin is types.UnionType:
        return _union(args, where, depth)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([m.value for m in annotation])
    if annotation in _ARRAYS or origin in _SEQUENCE_ORIGINS or origin is typing.Sequence:
        item = schema_for(args[0], where=where, _depth=depth) if args else None
        return {"type": "array", "items": item} if item is not None else {"type": "array"}
    if annotation is tuple or origin is tuple:
        return _tuple(args, where, depth)
    if annotation is dict or origin in (dict, Mapping) or origin is typing.Mapping:
        if len(args) == 2:
            return {
                "type": "object",
                "additionalProperties": schema_for(args[1], where=where, _depth=depth),
            }
        return {"type": "object"}
    if typing.is_typeddict(annotation):
        return _typed_dict(annotation, where, depth)
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _dataclass(annotation, where, depth)
    if _is_pydantic_model(annotation):
        return harmonize_schema(annotation.model_json_schema())
    raise InputError(
        f"cannot describe {where} of type {annotation!r} as JSON schema; use str, int, float, "
        "bool, None, list, tuple, dict, Literal, an Enum, a TypedDict, a dataclass or a "
        "pydantic model"
    )


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {json_kind(v) for v in values}
    out: dict[str, Any] = {}
    if len(kinds) == 1:
        out["type"] = kinds.pop()
    elif len(kinds - {"null"}) == 1:
        out["type"] = [(kinds - {"null"}).pop(), "null"]
    out["enum"] = values
    return out


def json_kind(value: Any) -> str:
    """The JSON Schema type of a scalar (anything else reads as ``string``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _union(args: tuple[Any, ...], where: str, depth: int) -> dict[str, Any]:
    members = [a for a in args if a is not type(None) and a is not None]
    nullable = len(members) < len(args)
    if len(members) == 1:
        out = schema_for(members[0], where=where, _depth=depth)
        return _add_null(out) if nullable else out
    # Literal members of a union merge into one enum.
    if all(get_origin(m) is Literal for m in members):
        values = [v for m in members for v in get_args(m)]
        return _enum_schema([*values, None] if nullable else values)
    schemas = [schema_for(m, where=where, _depth=depth) for m in members]
    if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
        kinds = [s["type"] for s in schemas]
        return {"type": [*kinds, "null"] if nullable else kinds}
    out = {"oneOf": schemas}
    return _add_null(out) if nullable else out


def _add_null(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    # A type list reads well for scalars (`number | null`); an object or array
    # keeps its body visible only with `nullable`.
    if isinstance(kind, str) and kind not in ("object", "array") and "oneOf" not in schema:
        schema["type"] = [kind, "null"]
        if "enum" in schema and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
    elif isinstance(kind, list) and "enum" not in schema:
        if "null" not in kind:
            schema["type"] = [*kind, "null"]
    elif kind != "null":
        schema["nullable"] = True
    return schema


def _tuple(args: tuple[Any, ...], where: str, depth: int) -> dict[str, Any]:
    if not args:
        return {"type": "array"}
    if len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": schema_for(args[0], where=where, _depth=depth)}
    items = [schema_for(a, where=where, _depth=depth) for a in args]
    return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}


def _typed_dict(cls: Any, where: str, depth: int) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    required_keys = getattr(cls, "__required_keys__", frozenset(hints))
    properties = {
        key: schema_for(hint, where=f"{where}.{key}", _depth=depth) for key, hint in hints.items()
    }
    # An explicit Required/NotRequired wins: with string annotations (PEP 563)
    # some Python versions leave such keys in the wrong __required_keys__ set.
    required = [
        key
        for key, hint in hints.items()
        if _wrapper_name(hint) == "Required"
        or (key in required_keys and _wrapper_name(hint) != "NotRequired")
    ]
    return object_schema(properties, required)


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """``{"type": "object", "properties": ..., "required": ...}``, without an empty ``required``."""
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _wrapper_name(hint: Any) -> str | None:
    origin = get_origin(hint)
    if origin is typing.Annotated:
        return _wrapper_name(get_args(hint)[0])
    return getattr(origin, "_name", None) if origin in _REQUIRED_WRAPPERS else None


def _dataclass(cls: type, where: str, depth: int) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        prop = schema_for(hints.get(field.name, Any), where=f"{where}.{field.name}", _depth=depth)
        if field.default is not dataclasses.MISSING:
            if _is_json(field.default) and field.default is not None:
                prop["default"] = field.default
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        properties[field.name] = prop
    return object_schema(properties, required)


def _is_pydantic_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and callable(getattr(annotation, "model_json_schema", None))


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def json_default(value: Any) -> tuple[bool, Any]:
    """``(True, json value)`` when a parameter default can be shown in the schema."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    return (_is_json(value), value)


def harmonize_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in the vocabulary the harmony renderer understands.

    ``$ref`` is inlined from ``$defs``/``definitions``, ``title`` and null
    defaults dropped, ``anyOf`` rewritten (a type list, ``nullable``, or
    ``oneOf``), a one-member ``allOf`` merged. The input is not modified.

    >>> harmonize_schema({"title": "M", "type": "object", "properties": {"a": {
    ...     "anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "A"}}})
    {'type': 'object', 'properties': {'a': {'type': ['integer', 'null']}}}
    """
    root = copy.deepcopy(dict(schema))
    defs = {**root.pop("definitions", {}), **root.pop("$defs", {})}
    out: dict[str, Any] = _harmonize(root, defs, ())
    return out


def _harmonize(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_harmonize(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in defs:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:  # a recursive model: stop describing it
            return {"type": "object"}
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _harmonize(merged, defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if (key == "title" and isinstance(value, str)) or (key == "default" and value is None):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: _harmonize(v, defs, seen) for k, v in value.items()}
        else:
            out[key] = _harmonize(value, defs, seen)
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del out["allOf"]
        out = {**all_of[0], **out}
    any_of = out.pop("anyOf", None)
    if isinstance(any_of, list):
        out = _merge_any_of(out, any_of)
    return out


def _merge_any_of(out: dict[str, Any], members: list[Any]) -> dict[str, Any]:
    non_null = [m for m in members if m != {"type": "null"}]
    nullable = len(non_null) < len(members)
    if len(non_null) == 1 and isinstance(non_null[0], dict):
        merged = {**non_null[0], **out}
        return _add_null(merged) if nullable else merged
    if all(isinstance(m, dict) and set(m) == {"type"} for m in non_null):
        # A member's own type list joins the others' (a list inside "type" is no schema).
        kinds: list[Any] = []
        for m in non_null:
            for kind in m["type"] if isinstance(m["type"], list) else [m["type"]]:
                if kind not in kinds:
                    kinds.append(kind)
        if nullable and "null" not in kinds:
            kinds.append("null")
        return {**out, "type": kinds}
    merged = {**out, "oneOf": non_null}
    return _add_null(merged) if nullable else merged
