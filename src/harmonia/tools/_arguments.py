"""Reading a call's JSON arguments and checking them against a schema.

Every message here is written for the model: it says what was wrong, where
(the JSON parse position, the JSON path of a schema violation) and what is
valid, so that the model can send a corrected call. ``jsonschema`` (the
``tools`` extra) is imported on the first validation only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harmonia._errors import install_hint

from .. import InputError, ToolError
from ._base import ToolCall
from ._schema import json_kind

# How many violations one reply lists.
_ERRORS_SHOWN = 3
# How much of a schema an error message quotes before it is cut.
_SCHEMA_QUOTE_LIMIT = 1500


def load_arguments(call: ToolCall, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The call's arguments as a JSON object, validated against ``schema`` when given.

    An empty body counts as ``{}`` (models call argument-less functions that
    way). Raises :class:`harmonia.ToolError` with a message for the model.

    >>> load_arguments(ToolCall("functions.f", "functions", "f", '{"a": 1}'))
    {'a': 1}
    >>> load_arguments(ToolCall("functions.f", "functions", "f", '{"a": 1'))
    Traceback (most recent call last):
    ...
    harmonia._errors.ToolError: the arguments to functions.f are not valid JSON: ...
    """
    text = call.arguments.strip()
    if not text:
        value: Any = {}
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolError(
                f"the arguments to {call.recipient} are not valid JSON: {exc.msg} at line "
                f"{exc.lineno} column {exc.colno} (character {exc.pos}). Send one JSON object"
                + _expected(schema),
                tool=call.recipient,
            ) from None
    if not isinstance(value, dict):
        raise ToolError(
            f"the arguments to {call.recipient} must be a JSON object, not "
            f"{_json_type(value)}" + _expected(schema),
            tool=call.recipient,
        )
    if schema is not None:
        validate_arguments(value, schema, tool=call.recipient)
    return value


def validate_arguments(value: Any, schema: Mapping[str, Any], *, tool: str) -> None:
    """Raise :class:`harmonia.ToolError` naming the JSON path of the first violation."""
    validator = _validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: (len(e.path), list(e.path)))
    if not errors:
        return
    shown = "; ".join(
        f"at {_json_path(e.absolute_path)}: {e.message}" for e in errors[:_ERRORS_SHOWN]
    )
    more = f" (and {len(errors) - _ERRORS_SHOWN} more)" if len(errors) > _ERRORS_SHOWN else ""
    raise ToolError(
        f"invalid arguments for {tool}: {shown}{more}" + _expected(schema),
        tool=tool,
    )


def validation_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as jsonschema should read it.

    Declarations use two spellings that render well as TypeScript but mean
    something else to a validator: ``nullable: true`` (OpenAPI) and ``oneOf``
    for a union whose members may overlap (``int | float``). Here ``nullable``
    admits ``null`` and ``oneOf`` becomes ``anyOf``.

    >>> validation_schema({"type": "string", "nullable": True})
    {'anyOf': [{'type': 'string'}, {'type': 'null'}]}
    """
    relaxed: dict[str, Any] = _relax(dict(schema))
    return relaxed


def _relax(node: Any) -> Any:
    if isinstance(node, list):
        return [_relax(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _relax(value) for key, value in node.items()}
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


# Validators by the schema's value (its canonical JSON text): a schema changed in
# place after a call, even deep inside, gets a new validator (a key by id() would
# keep validating against the old one). The validator holds its own copy.
_VALIDATORS: dict[str, Any] = {}


def _validator(schema: Mapping[str, Any]) -> Any:
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError):  # keys that JSON cannot sort or hold: not cached
        key = None
    cached = None if key is None else _VALIDATORS.get(key)
    if cached is not None:
        return cached
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - depends on the environment
        raise InputError(
            f"validating tool arguments needs jsonschema: {install_hint('tools')}"
        ) from None
    relaxed = validation_schema(schema)
    cls = jsonschema.validators.validator_for(relaxed, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(relaxed)
    except jsonschema.SchemaError as exc:
        raise InputError(f"a tool declares an invalid JSON schema: {exc.message}") from None
    validator = cls(relaxed)
    if len(_VALIDATORS) > 256:  # bounded: schemas come from code, but MCP servers can churn
        _VALIDATORS.clear()
    if key is not None:
        _VALIDATORS[key] = validator
    return validator


def _json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _json_type(value: Any) -> str:
    # A parsed JSON value that is not an object: a list, or a scalar json_kind names.
    if isinstance(value, list):
        return "an array"
    kind = json_kind(value)
    return {"null": "null", "boolean": "a boolean", "string": "a string"}.get(kind, "a number")


def _expected(schema: Mapping[str, Any] | None) -> str:
    if schema is None:
        return "."
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    if len(text) > _SCHEMA_QUOTE_LIMIT:
        text = text[:_SCHEMA_QUOTE_LIMIT] + "..."
    return f". Expected arguments matching this JSON schema: {text}"
