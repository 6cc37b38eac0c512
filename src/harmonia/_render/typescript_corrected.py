"""Opt-in corrected JSON Schema -> TypeScript rendering.

The reference converter (reproduced byte for byte in
:mod:`harmonia._typescript`) drops or garbles much of what real-world schemas
contain -- pydantic's ``Optional[X]`` becomes ``any``, ``$ref`` becomes
``any``, ``"a" | "b"[]`` means something else than intended.  This mode keeps
the reference *layout* (unindented top-level fields, ``name?: T,`` lines,
``// description`` above a field, ``// default: ...`` after it, nested bodies
indented by four spaces with the closing brace at the field indent) so the
model still sees a familiar format, but renders the types correctly:

* ``anyOf``/``oneOf`` become real unions, flattened and de-duplicated, and
  parenthesised where precedence requires it (``(string | number)[]``).  A
  union whose variants carry descriptions or defaults is laid out one variant
  per line with the comments *above* each variant (a trailing ``//`` comment
  would swallow the ``,`` or the ``) => any;`` that follows, a bug of the
  reference at the top level).
* ``nullable: true`` works everywhere (also at the top level and on union
  properties) and adds ``| null`` only when ``null`` is not already a union
  member (the reference does a substring test, so an enum value
  ``"nullable"`` suppressed it).
* Local ``$ref`` (``#/$defs/X``, ``#/definitions/X``, any ``#/...`` JSON
  pointer, ``#``) is resolved.  A reference that is already being expanded
  (recursive schema) renders as the definition's name, or ``any`` if the name
  is not an identifier; unresolvable or remote references render ``any``.  A
  field whose schema is a ``$ref`` takes its description/examples/default
  from the target when it has none itself.
* ``allOf`` with one entry is that entry (pydantic v1's wrapper around a
  ``$ref``); with several it is an intersection ``A & B``.
* ``const`` renders as a literal type; ``enum`` (with or without ``type``, of
  any JSON scalar) renders as a literal union, keeping only members that match
  the declared ``type`` (a JSON Schema instance must satisfy both).
* A ``type`` list renders every member in full: ``["object", "null"]`` gives
  the object body ``| null``, ``"null"`` is ``null``; a schema with
  ``properties`` but no ``type`` is treated as an object.
* ``additionalProperties`` with a schema becomes an index signature
  ``[key: string]: T,``; ``items`` given as a list becomes a tuple ``[A, B]``;
  the ``false`` schema and an empty union are ``never``.
* Comments: descriptions are split into lines, each prefixed with ``//``
  (the reference only prefixes the first line, so later lines read as code);
  an object's description is printed once above its field instead of twice;
  empty descriptions/titles are omitted; no comment line has trailing spaces.
* Defaults, examples and enum/const literals are always printed as JSON, so
  quotes and newlines are escaped (the reference inserted some strings raw,
  breaking the line structure) and non-string examples are kept.
* Property names that are not identifiers are quoted (``"my-key"?: string``).
* Bounded: inlining ``$ref``s may nest at most :data:`MAX_DEPTH` levels and
  produce at most :data:`MAX_CHARS` characters in all (a definition shared
  along a path doubles the text at every level); beyond that ``RenderError``
  names the ``$ref`` chain instead of recursing or expanding without end.

The input goes through the same json.dumps -> serde_json round trip as in the
reference mode, so numbers print identically and invalid JSON raises
``ValueError``.  The same handler-table design is used: one small function
per keyword and per ``type`` value.

>>> schema_to_typescript_corrected({"type": "array", "items": {"enum": ["x", "y"]}})
'("x" | "y")[]'
>>> schema_to_typescript_corrected({"anyOf": [{"type": "string"}, {"type": "null"}]})
'string | null'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import NamedTuple
from urllib.parse import unquote

from .._errors import RenderError
from .serde_json import MAX_NESTING, JsonValue, emit_serde_json, serde_roundtrip

__all__ = ["MAX_CHARS", "MAX_DEPTH", "schema_to_typescript_corrected"]

#: Nesting levels of the rendered type, counting every ``$ref`` inlined along the
#: way; the same bound as the JSON nesting of a content, so a schema without
#: ``$ref`` never reaches it and Python's recursion limit is never at risk.
MAX_DEPTH = MAX_NESTING
#: Characters that inlining ``$ref``s may produce in one schema, counting each
#: inlining (a definition inlined inside another is counted again): a bound on the
#: work, reached only by runaway expansion (real schemas inline a few kilobytes).
MAX_CHARS = 1 << 20

Schema = dict[str, JsonValue]

_PROPERTY_STEP = "    "  # nested object bodies, as in the reference
_VARIANT_STEP = "   "  # bodies after a " | " marker, as in the reference
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")


class _Ts(NamedTuple):
    """A rendered type, kept structured so callers can add parentheses."""

    members: tuple[str, ...]  # more than one: a union
    compound: bool = False  # a single intersection, needs parentheses in T[]

    @property
    def text(self) -> str:
        return " | ".join(self.members)


@dataclass(slots=True, eq=False)
class _Budget:
    """Mutable, shared by one conversion: the current depth and the inlined ``$ref``s.

    ``inlined`` maps (ref, indent, $ref chain, depth) to its rendering: a
    definition referenced from several places along the same path renders once.
    """

    depth: int = 0
    inlined_chars: int = 0
    inlined: dict[tuple[str, str, tuple[str, ...], int], _Ts] = field(default_factory=dict)


@dataclass(frozen=True)
class _Context:
    root: JsonValue  # the document that local $refs point into
    expanding: tuple[str, ...] = ()  # $refs on the current path (cycle guard)
    budget: _Budget = field(default_factory=_Budget)

    def too_big(self, what: str) -> RenderError:
        chain = " -> ".join(self.expanding[1:]) or "no $ref"
        if len(chain) > 200:
            chain = chain[:100] + " ... " + chain[-100:]
        return RenderError(f"schema {what} (inlining $ref: {chain}); simplify the schema")


KeywordHandler = Callable[[JsonValue, Schema, str, _Context], "_Ts | None"]
TypeHandler = Callable[[Schema, str, _Context], _Ts]


class _Missing(Enum):
    """Typed sentinel for a JSON pointer that leads nowhere."""

    MISSING = "missing"


_ANY = _Ts(("any",))
_NEVER = _Ts(("never",))


def schema_to_typescript_corrected(schema: object, indent: str = "") -> str:
    """Render ``schema`` as corrected TypeScript (see the module docstring).

    >>> schema_to_typescript_corrected({"type": "object", "properties": {
    ...     "n": {"type": "integer", "enum": [1, 2], "description": "N\\nmore"}}})
    '{\\n// N\\n// more\\nn?: 1 | 2,\\n}'
    """
    root = serde_roundtrip(schema)
    # The root is being rendered, so a "#" reference inside it is a cycle.
    context = _Context(root, expanding=("#",))
    prefix = ""
    if isinstance(root, dict):
        description = _documentation(root, context).get("description")
        prefix = _comment_lines(description, indent)
        variants = _commented_union(root, description)
        if variants is not None:
            lead = "" if prefix else "\n"
            return prefix + lead + _variant_lines(variants, indent, context).rstrip("\n")
    return prefix + _render(root, indent, context).text


def _render(schema: JsonValue, indent: str, context: _Context) -> _Ts:
    """The first keyword handler that accepts the schema decides its type."""
    if schema is False:
        return _NEVER  # the schema that matches nothing
    if not isinstance(schema, dict):
        return _ANY
    budget = context.budget
    if budget.depth >= MAX_DEPTH:
        raise context.too_big(f"nests more than {MAX_DEPTH} levels deep")
    budget.depth += 1
    try:
        rendered = _ANY
        for keyword, handler in _KEYWORD_HANDLERS.items():
            if keyword in schema:
                result = handler(schema[keyword], schema, indent, context)
                if result is not None:
                    rendered = result
                    break
    finally:
        budget.depth -= 1
    return _nullable(schema, rendered)


def _nullable(schema: Schema, rendered: _Ts) -> _Ts:
    # Membership, not substring: `"nullable" | "b"` still gets `| null`.
    if schema.get("nullable") is True and "null" not in rendered.members:
        return _union([rendered, _Ts(("null",))])
    return rendered


# -- Keyword handlers (table order is precedence order) --------------------


def _keyword_ref(ref: JsonValue, schema: Schema, indent: str, context: _Context) -> _Ts | None:
    if not isinstance(ref, str):
        return None
    if ref in context.expanding:
        # Expanding again would never end; the name still tells the model
        # which shape recurs.
        name = ref.rsplit("/", 1)[-1]
        return _Ts((name,)) if _IDENTIFIER.match(name) else _ANY
    budget = context.budget
    key = (ref, indent, context.expanding, budget.depth)
    inner = replace(context, expanding=(*context.expanding, ref))
    rendered = budget.inlined.get(key)
    if rendered is None:
        target = _resolve_pointer(context.root, ref)
        if target is _Missing.MISSING:
            return _ANY  # remote or dangling reference: nothing to show
        rendered = budget.inlined[key] = _render(target, indent, inner)
    # Counted at every inlining, a reused one too, so a definition shared along a
    # path (which doubles the text per level) or referenced from thousands of
    # places stops here instead of growing without end.
    budget.inlined_chars += sum(map(len, rendered.members))
    if budget.inlined_chars > MAX_CHARS:
        raise inner.too_big(f"expands to more than {MAX_CHARS} characters")
    return rendered


def _keyword_all_of(parts: JsonValue, schema: Schema, indent: str, context: _Context) -> _Ts | None:
    if not isinstance(parts, list) or not parts:
        return None
    rendered = [_render(part, indent, context) for part in parts]
    if len(rendered) == 1:
        return rendered[0]  # pydantic v1 wraps a lone $ref in allOf
    return _Ts((" & ".join(_operand(part) for part in rendered),), compound=True)


def _keyword_union(
    variants: JsonValue, schema: Schema, indent: str, context: _Context
) -> _Ts | None:
    # anyOf and oneOf differ only in exclusivity, which TypeScript cannot say.
    if not isinstance(variants, list):
        return None
    if not variants:
        return _NEVER
    return _union([_render(variant, indent, context) for variant in variants])


def _keyword_const(value: JsonValue, schema: Schema, indent: str, context: _Context) -> _Ts | None:
    return _Ts((emit_serde_json(value),))


def _keyword_enum(members: JsonValue, schema: Schema, indent: str, context: _Context) -> _Ts | None:
    if not isinstance(members, list) or not members:
        return None
    declared = _declared_types(schema)
    kept = [member for member in members if not declared or _json_types(member) & declared]
    if not kept:
        return _NEVER
    return _union([_Ts((emit_serde_json(member),)) for member in kept])


def _keyword_type(
    type_value: JsonValue, schema: Schema, indent: str, context: _Context
) -> _Ts | None:
    names = [type_value] if isinstance(type_value, str) else type_value
    if not isinstance(names, list):
        return None
    rendered = [
        _TYPE_HANDLERS.get(name, _type_unknown)(schema, indent, context)
        for name in names
        if isinstance(name, str)
    ]
    return _union(rendered) if rendered else None


def _keyword_properties(
    properties: JsonValue, schema: Schema, indent: str, context: _Context
) -> _Ts | None:
    # Reached only without a usable `type`: properties imply an object.
    return _type_object(schema, indent, context) if isinstance(properties, dict) else None


_KEYWORD_HANDLERS: dict[str, KeywordHandler] = {
    "$ref": _keyword_ref,
    "allOf": _keyword_all_of,
    "anyOf": _keyword_union,
    "oneOf": _keyword_union,
    "const": _keyword_const,
    "enum": _keyword_enum,
    "type": _keyword_type,
    "properties": _keyword_properties,
}


# -- Type handlers ---------------------------------------------------------


def _named(name: str) -> TypeHandler:
    """The handler of a type rendered by its name alone."""
    rendered = _Ts((name,))
    return lambda schema, indent, context: rendered


_type_unknown = _named("any")


def _type_array(schema: Schema, indent: str, context: _Context) -> _Ts:
    if "items" not in schema:
        return _Ts(("Array<any>",))
    items = schema["items"]
    if isinstance(items, list):
        # Draft-4..2019 tuple form: positional item schemas.
        members = ", ".join(_render(item, indent, context).text for item in items)
        return _Ts((f"[{members}]",))
    if items is True or items == {}:
        return _Ts(("Array<any>",))  # unconstrained items, as the reference writes it
    return _Ts((_operand(_render(items, indent, context)) + "[]",))


def _type_object(schema: Schema, indent: str, context: _Context) -> _Ts:
    # The object's own description is printed by whoever introduces it (the
    # field, the union variant, the top level), never a second time here.
    out = ["{\n"]
    properties = schema.get("properties")
    if isinstance(properties, dict):
        required = _required_names(schema)
        for key, value in properties.items():
            out.append(_field(key, value, key in required, indent, context))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        value_type = _render(extra, indent + _PROPERTY_STEP, context).text
        out.append(f"{indent}[key: string]: {value_type},\n")
    out.append(indent + "}")
    return _Ts(("".join(out),))


_TYPE_HANDLERS: dict[str, TypeHandler] = {
    "string": _named("string"),
    "number": _named("number"),
    "integer": _named("number"),  # TypeScript has no integer type
    "boolean": _named("boolean"),
    "null": _named("null"),
    "array": _type_array,
    "object": _type_object,
}


# -- Fields ----------------------------------------------------------------


def _required_names(schema: Schema) -> frozenset[str]:
    return _strings(schema.get("required"))


def _strings(value: JsonValue) -> frozenset[str]:
    """The strings in ``value`` when it is a list (none otherwise)."""
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def _field(key: str, value: JsonValue, required: bool, indent: str, context: _Context) -> str:
    prop: Schema = value if isinstance(value, dict) else {}
    info = _documentation(prop, context)
    label = _field_name(key) + ("" if required else "?")
    out = [_field_comments(prop, info, indent)]
    variants = _commented_union(prop, info.get("description"))
    if variants is not None:
        # Defaults go above: after the last variant they would read as its own.
        if "default" in info:
            out.append(f"{indent}// default: {emit_serde_json(info['default'])}\n")
        out.append(f"{indent}{label}:\n")
        out.append(_variant_lines(variants, indent, context).rstrip("\n") + ",\n")
        return "".join(out)
    rendered = _render(value, indent + _PROPERTY_STEP, context).text
    default = f" // default: {emit_serde_json(info['default'])}" if "default" in info else ""
    out.append(f"{indent}{label}: {rendered},{default}\n")
    return "".join(out)


def _field_comments(prop: Schema, info: Schema, indent: str) -> str:
    out = []
    title = prop.get("title")
    if isinstance(title, str) and title.strip():
        out.append(_comment_lines(title, indent) + f"{indent}//\n")
    out.append(_comment_lines(info.get("description"), indent))
    examples = info.get("examples")
    if isinstance(examples, list) and examples:
        out.append(f"{indent}// Examples:\n")
        out.extend(f"{indent}// - {emit_serde_json(example)}\n" for example in examples)
    return "".join(out)


def _documentation(prop: Schema, context: _Context) -> Schema:
    """Description/examples/default of a field, looked up through ``$ref``.

    The field's own keywords win; a referenced definition fills the gaps
    (pydantic puts an enum's or model's docstring on the definition).
    """
    info: Schema = {key: prop[key] for key in ("description", "examples", "default") if key in prop}
    seen: set[str] = set()
    current = prop
    while True:
        ref = current.get("$ref")
        if not isinstance(ref, str) or ref in seen:
            break
        seen.add(ref)
        target = _resolve_pointer(context.root, ref)
        if not isinstance(target, dict):
            break
        for key in ("description", "examples", "default"):
            if key in target and key not in info:
                info[key] = target[key]
        current = target
    return info


def _field_name(key: str) -> str:
    return key if _IDENTIFIER.match(key) else emit_serde_json(key)


# -- Unions laid out one variant per line ----------------------------------


class _Variant(NamedTuple):
    comments: tuple[str, ...]  # comment texts shown above the variant
    schema: JsonValue


def _commented_union(schema: Schema, shown: JsonValue) -> list[_Variant] | None:
    """Variants of an anyOf/oneOf worth a multi-line layout, else None.

    Only unions that actually carry per-variant documentation get the long
    form; plain ones stay inline (``string | number``).  ``shown`` is the
    description already printed above, which a variant does not repeat.
    """
    if any(keyword in schema for keyword in ("$ref", "allOf")):
        return None  # those keywords take precedence in _render
    raw = next(
        (schema[key] for key in ("anyOf", "oneOf") if isinstance(schema.get(key), list)), None
    )
    if not isinstance(raw, list):
        return None
    variants = [_Variant(_variant_comments(variant, shown), variant) for variant in raw]
    if not any(variant.comments for variant in variants):
        return None
    if schema.get("nullable") is True:
        # Whether a `| null` line is needed is known only once the variants are
        # rendered; _variant_lines renders them once and drops it if so.
        variants.append(_NULL_VARIANT)
    return variants


def _variant_comments(variant: JsonValue, shown: JsonValue) -> tuple[str, ...]:
    if not isinstance(variant, dict):
        return ()
    comments: list[str] = []
    description = variant.get("description")
    if isinstance(description, str) and description.strip() and description != shown:
        comments.extend(_split_lines(description))
    if "default" in variant:
        comments.append("default: " + emit_serde_json(variant["default"]))
    return tuple(comments)


_NULL_VARIANT = _Variant((), {"type": "null"})


def _variant_lines(variants: list[_Variant], indent: str, context: _Context) -> str:
    # Comments sit above each " | T" line, indented to line up with the bar.
    out: list[str] = []
    has_null = False
    for variant in variants:
        if variant is _NULL_VARIANT:
            if has_null:
                continue  # `nullable` on a union that already admits null
            rendered = _Ts(("null",))
        else:
            rendered = _render(variant.schema, indent + _VARIANT_STEP, context)
            has_null = has_null or "null" in rendered.members
        out.extend(_comment_line(comment, indent + " ") for comment in variant.comments)
        out.append(f"{indent} | {rendered.text}\n")
    return "".join(out)


# -- Small helpers ---------------------------------------------------------


def _union(parts: list[_Ts]) -> _Ts:
    """Flatten nested unions and drop duplicate members, keeping order.

    An intersection member needs no parentheses: `A & B | C` already parses
    as `(A & B) | C`.
    """
    members = dict.fromkeys(member for part in parts for member in part.members)
    if len(members) == 1:
        return parts[0]  # all parts were the same type; keep its flags
    return _Ts(tuple(members))


def _operand(rendered: _Ts) -> str:
    """Text of a type used as an operand of ``[]`` or ``&``."""
    if len(rendered.members) > 1 or rendered.compound:
        return f"({rendered.text})"
    return rendered.text


def _declared_types(schema: Schema) -> frozenset[str]:
    declared = schema.get("type")
    return _strings([declared] if isinstance(declared, str) else declared)


def _json_types(value: JsonValue) -> frozenset[str]:
    """JSON Schema type names an instance satisfies (1.0 is an integer too)."""
    if value is None:
        return frozenset({"null"})
    if isinstance(value, bool):
        return frozenset({"boolean"})
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return frozenset({"integer", "number"})
    if isinstance(value, float):
        return frozenset({"number"})
    if isinstance(value, str):
        return frozenset({"string"})
    return frozenset({"array" if isinstance(value, list) else "object"})


def _resolve_pointer(root: JsonValue, ref: str) -> JsonValue | _Missing:
    """Follow a local ``#...`` JSON pointer (RFC 6901 in a URI fragment)."""
    if not ref.startswith("#"):
        return _Missing.MISSING
    pointer = unquote(ref[1:])
    if not pointer:
        return root
    if not pointer.startswith("/"):
        return _Missing.MISSING  # `#anchor` style references are not supported
    node = root
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _Missing.MISSING
    return node


def _split_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").split("\n")


def _comment_line(text: str, indent: str) -> str:
    return f"{indent}// {text}".rstrip() + "\n"


def _comment_lines(text: JsonValue, indent: str) -> str:
    """``// `` comment lines for a description; nothing for a blank one."""
    if not isinstance(text, str) or not text.strip():
        return ""
    return "".join(_comment_line(line, indent) for line in _split_lines(text))
