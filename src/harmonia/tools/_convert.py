"""Validated JSON arguments to the Python values a function is annotated with, and results back.

Arguments have been checked against the schema before they get here, so this
only builds the richer types JSON cannot carry: enums, dataclasses, pydantic
models, tuples, sets, floats given as integers.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from .. import ToolError


def to_python(value: Any, annotation: Any) -> Any:
    """``value`` (JSON) as an instance of ``annotation``, as far as it can be built.

    >>> import enum
    >>> class Unit(enum.Enum):
    ...     C = "c"
    >>> to_python({"u": ["c"]}, dict[str, list[Unit]])
    {'u': [<Unit.C: 'c'>]}
    >>> to_python(3, float), to_python([1, "a"], tuple[int, str])
    (3.0, (1, 'a'))
    """
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation is Any or annotation is None or (value is None and _admits_none(annotation)):
        return value
    if origin is typing.Annotated or getattr(origin, "_name", None) in ("Required", "NotRequired"):
        return to_python(value, args[0])
    if origin is Union or origin is types.UnionType:
        return _union(value, args)
    if origin is Literal:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if origin in (list, set, frozenset) or origin in (typing.Sequence, typing.List):  # noqa: UP006
        items = [to_python(v, args[0]) if args else v for v in value]
        return origin(items) if origin in (set, frozenset) else items
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(to_python(v, args[0]) for v in value)
        return tuple(to_python(v, a) for v, a in zip(value, args, strict=True))
    if annotation is tuple:
        return tuple(value)
    if origin in (dict, typing.Mapping) and len(args) == 2:
        return {k: to_python(v, args[1]) for k, v in value.items()}
    if typing.is_typeddict(annotation):
        hints = typing.get_type_hints(annotation, include_extras=True)
        return {k: to_python(v, hints.get(k, Any)) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        hints = typing.get_type_hints(annotation, include_extras=True)
        return annotation(**{k: to_python(v, hints.get(k, Any)) for k, v in value.items()})
    if isinstance(annotation, type) and callable(getattr(annotation, "model_validate", None)):
        return annotation.model_validate(value)  # type: ignore[attr-defined]
    return value


def _admits_none(annotation: Any) -> bool:
    if annotation is type(None):
        return True
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return type(None) in get_args(annotation)
    if origin is Literal:
        return None in get_args(annotation)
    return False


def _union(value: Any, members: tuple[Any, ...]) -> Any:
    # The first member that builds without error wins; a member whose JSON kind
    # matches exactly (str for str, int for int) is preferred over a conversion.
    for member in members:
        if isinstance(member, type) and type(value) is member:
            return value
    for member in members:
        if member is type(None):
            continue
        try:
            return to_python(value, member)
        except Exception:  # try the next member
            continue
    return value


def to_json_text(result: Any) -> str:
    """A function's result as the text the model reads: strings as they are, the rest as JSON.

    >>> to_json_text("sunny"), to_json_text({"t": 20, "unit": "°C"}), to_json_text(None)
    ('sunny', '{"t": 20, "unit": "°C"}', 'null')
    """
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"the function's result cannot be sent as JSON: {exc}") from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
