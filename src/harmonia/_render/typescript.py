"""JSON Schema -> TypeScript-like text, byte-exact with openai_harmony 0.0.8.

This is the text that follows ``type NAME = (_: `` in a tools section.  The
reference converter has many quirks (trailing spaces, object descriptions
printed twice, ``"a" | "b"[]``, a substring test for ``| null``, three
different ways of quoting a string default, ``anyOf``/``$ref`` rendered as
``any``...).  They are all reproduced on purpose: gpt-oss was trained on this
exact text, and byte-exact output is what lets harmonia be swapped in for the
reference.  See :mod:`.typescript_corrected` (re-exported here as
:func:`schema_to_typescript_corrected`) for an opt-in corrected mode.

Structure: like jsonschema's validators, each keyword (``oneOf``, ``type``)
and each ``type`` value has its own small handler, found through a lookup
table, instead of one long if-ladder.

>>> schema_to_typescript({"type": "object", "properties": {"a": {"type": "string"}}})
'{\\na?: string,\\n}'
>>> schema_to_typescript({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}})
'"x" | "y"[]'
"""

from __future__ import annotations

from collections.abc import Callable

from .serde_json import JsonValue, emit_serde_json, serde_roundtrip

# The corrected mode lives in its own module; re-exported so callers can pick
# either converter from here.
from .typescript_corrected import _required_names, schema_to_typescript_corrected

__all__ = ["schema_to_typescript", "schema_to_typescript_corrected"]

Schema = dict[str, JsonValue]

# A keyword handler receives the keyword's value and the whole schema; it
# returns None when the value is unusable so the next keyword gets its turn.
KeywordHandler = Callable[[JsonValue, Schema, str], "str | None"]
# A type handler renders a schema whose "type" is one particular string.
TypeHandler = Callable[[Schema, str], str]

# Nested property bodies are indented by four spaces, oneOf variant bodies by
# three (they follow a " | " marker); both are fixed by the reference.
_PROPERTY_STEP = "    "
_VARIANT_STEP = "   "


def schema_to_typescript(schema: object, indent: str = "") -> str:
    """Return the reference's TypeScript rendering of ``schema``.

    ``schema`` is the Python value given as tool ``parameters``; it first goes
    through the same json.dumps -> serde_json round trip as in the reference
    (so it raises ``ValueError`` for NaN/Infinity or lone surrogates anywhere in
    it, and ``TypeError`` for values json.dumps cannot write).  Pass the raw
    value: round-tripping twice is not always idempotent for floats.
    """
    return _render(serde_roundtrip(schema), indent)


def _render(schema: JsonValue, indent: str) -> str:
    """TS(schema, indent): the first keyword that yields a rendering wins."""
    if not isinstance(schema, dict):
        return "any"  # `true`, `"string"`, numbers...: nothing to look at
    for keyword, handler in _KEYWORD_ORDER:
        if keyword in schema:
            rendered = handler(schema[keyword], schema, indent)
            if rendered is not None:
                return rendered
    return "any"


# -- Keyword handlers ------------------------------------------------------


def _keyword_one_of(variants: JsonValue, schema: Schema, indent: str) -> str | None:
    """Top-level-style oneOf: one "\\n | T // comment" chunk per variant.

    No closing newline is written, so a trailing comment swallows whatever the
    caller appends (``// default: 1) => any;``); that is the reference output.
    """
    if not isinstance(variants, list):
        return None  # a non-array oneOf is ignored here and `type` is used
    inner = indent + _VARIANT_STEP
    chunks = []
    for variant in variants:
        parts = _variant_comment_parts(variant, None, False, json_enum=True)
        chunks.append(f"\n{indent} | {_nullable(variant, _render(variant, inner))}")
        chunks.append(_trailing_comment(parts))
    return "".join(chunks)


def _keyword_type(type_value: JsonValue, schema: Schema, indent: str) -> str | None:
    if isinstance(type_value, list):
        return _type_list(type_value)
    if isinstance(type_value, str):
        return _type_handler(type_value, _type_unknown)(schema, indent)
    return None  # e.g. `"type": 5`


def _type_list(names: list[JsonValue]) -> str | None:
    # Names only: an ["object", "null"] list renders `object | null` with no
    # body, and unknown names are kept literally.
    rendered = ["number" if name == "integer" else name for name in names if isinstance(name, str)]
    return " | ".join(rendered) if rendered else None


# oneOf is consulted before type, even when both are present (a tuple: _render
# walks it on every schema, and iterates it faster than a mapping).
_KEYWORD_ORDER: tuple[tuple[str, KeywordHandler], ...] = (
    ("oneOf", _keyword_one_of),
    ("type", _keyword_type),
)


# -- Type handlers ---------------------------------------------------------


def _type_string(schema: Schema, indent: str) -> str:
    # Enum members are inserted raw (no escaping) and non-strings are dropped.
    members = schema.get("enum")
    if isinstance(members, list):
        strings = [f'"{member}"' for member in members if isinstance(member, str)]
        if strings:
            return " | ".join(strings)
    return "string"


def _type_unknown(schema: Schema, indent: str) -> str:
    return "any"  # "null", "foo", ...


def _type_array(schema: Schema, indent: str) -> str:
    # No parentheses around the item type, hence `"x" | "y"[]`.
    if "items" in schema:
        return _render(schema["items"], indent) + "[]"
    return "Array<any>"


def _type_object(schema: Schema, indent: str) -> str:
    out = []
    description = schema.get("description")
    if isinstance(description, str):
        # Written before the brace, so a described property shows it twice.
        out.append(f"{indent}// {description}\n")
    out.append("{\n")
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required = _required_names(schema)
        for key, value in properties.items():
            out.append(_property(key, value, key in required, indent))
    out.append(indent + "}")
    return "".join(out)


_TYPE_HANDLERS: dict[str, TypeHandler] = {
    "string": _type_string,
    "number": lambda schema, indent: "number",  # numeric enums are not rendered
    "integer": lambda schema, indent: "number",
    "boolean": lambda schema, indent: "boolean",
    "array": _type_array,
    "object": _type_object,
}
_type_handler: Callable[[str, TypeHandler], TypeHandler] = _TYPE_HANDLERS.get


# -- Object properties -----------------------------------------------------


def _property(key: str, value: JsonValue, required: bool, indent: str) -> str:
    prop: Schema = value if isinstance(value, dict) else {}
    optional = "" if required else "?"
    header = _property_header(prop, indent)
    one_of = prop.get("oneOf")
    if isinstance(one_of, list):
        return header + _one_of_property(key + optional, prop, one_of, indent)
    return header + _plain_property(key + optional, value, prop, indent)


def _property_header(prop: Schema, indent: str) -> str:
    """Title, description and examples comments above a property line."""
    out = []
    title = prop.get("title")
    if isinstance(title, str):
        out.append(f"{indent}// {title}\n{indent}//\n")
    description = prop.get("description")
    # Any oneOf key, even an unusable one, moves the description elsewhere
    # (or, for a non-array oneOf, drops it).  Not split on newlines.
    if "oneOf" not in prop and isinstance(description, str):
        out.append(f"{indent}// {description}\n")
    examples = prop.get("examples")
    if isinstance(examples, list) and examples:
        # The header is written even when no example is a string.
        out.append(f"{indent}// Examples:\n")
        out.extend(
            f'{indent}// - "{example}"\n' for example in examples if isinstance(example, str)
        )
    return "".join(out)


def _plain_property(label: str, value: JsonValue, prop: Schema, indent: str) -> str:
    rendered = _nullable(value, _render(value, indent + _PROPERTY_STEP))
    comment = ""
    if "oneOf" not in prop and "default" in prop:
        comment = " // default: " + _default(prop["default"], prop)
    return f"{indent}{label}: {rendered},{comment}\n"


def _one_of_property(label: str, prop: Schema, variants: list[JsonValue], indent: str) -> str:
    out = []
    description = prop.get("description")
    own = description if isinstance(description, str) else None
    first = variants[0] if variants else None
    # The property's description is not repeated when the first variant
    # already carries the same text.
    repeated = own is not None and isinstance(first, dict) and first.get("description") == own
    above = own is not None and not repeated
    if above:
        out.append(f"{indent}// {own}\n")
    if "default" in prop:
        out.append(f"{indent}// default: {_default(prop['default'], prop)}\n")
    out.append(f"{indent}{label}:\n")
    inner = indent + _VARIANT_STEP
    for index, variant in enumerate(variants):
        parts = _variant_comment_parts(variant, own, index == 0 and above)
        rendered = _nullable(variant, _render(variant, inner))
        out.append(f"{indent} | {rendered}{_trailing_comment(parts)}\n")
    out.append(indent + ",\n")
    return "".join(out)


# -- Shared helpers: nullable, defaults, comments --------------------------


def _nullable(schema: JsonValue, rendered: str) -> str:
    # A plain substring test: an enum member "nullable" suppresses `| null`.
    if isinstance(schema, dict) and schema.get("nullable") is True and "null" not in rendered:
        return rendered + " | null"
    return rendered


def _is_enum(schema: Schema) -> bool:
    members = schema.get("enum")
    return isinstance(members, list) and bool(members)


def _default(default: JsonValue, holder: Schema, json_enum: bool = False) -> str:
    """A default as the reference writes it: a string quoted raw, or bare in an enum
    (as JSON under a top-level oneOf, ``json_enum``); anything else as JSON."""
    if not isinstance(default, str):
        return emit_serde_json(default)
    if not _is_enum(holder):
        return f'"{default}"'
    return emit_serde_json(default) if json_enum else default


def _variant_comment_parts(
    variant: JsonValue, parent_description: str | None, hidden: bool, *, json_enum: bool = False
) -> list[str]:
    """Comment texts after a oneOf variant: its description, then its default.

    ``hidden`` marks a description already printed above the property; a text
    equal to the property's own description is never repeated either.
    """
    if not isinstance(variant, dict):
        return []
    parts = []
    description = variant.get("description")
    if isinstance(description, str) and not hidden and description != parent_description:
        parts.append(description)
    if "default" in variant:
        parts.append("default: " + _default(variant["default"], variant, json_enum))
    return parts


def _trailing_comment(parts: list[str]) -> str:
    return " // " + " ".join(parts) if parts else ""
