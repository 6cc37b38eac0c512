"""JSON Schema to llama.cpp GBNF, for tool arguments and structured answers.

llama-server applies a JSON schema only to a whole output, never to a rule inside
a grammar, so harmonia compiles each ``%json {schema}`` of a turn grammar into GBNF
rules itself. What it enforces (everything else is refused with
:class:`UnsupportedConstraintError`, unless the schema's ``x-guidance`` says
``"lenient": true``, as :class:`~harmonia.constrained.GrammarOptions`'s
``lenient_schemas`` writes, in which case unknown keywords are ignored):

* ``type`` (one or a list), ``enum``, ``const``, ``anyOf``, ``oneOf`` (read as
  ``anyOf`` only when lenient or with ``coerce_one_of``, as llguidance does), an
  ``allOf`` of one schema, ``$ref`` to ``#``, ``#/$defs/...`` or
  ``#/definitions/...`` (recursion included; a subschema with ``$id`` is the root
  of its own references);
* objects: ``properties`` with ``required`` and ``additionalProperties`` (``false``,
  a schema, or absent/``true``): up to :data:`FREE_ORDER_MAX` declared properties in
  any order, each at most once (more in their declared order); extra keys anywhere,
  never a declared key (so no key is written twice with two values to check);
* arrays: ``items``, ``prefixItems``, ``minItems``, ``maxItems``;
* strings: ``minLength``, ``maxLength``, ``pattern`` (a regex subset) or ``format``
  (``date``, ``time``, ``date-time``, ``uuid``, ``email``); integers: ``minimum``,
  ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum`` exactly; numbers: the same
  bounds when they are whole numbers (see :mod:`._gbnf_lexical`);
* whitespace between JSON tokens bounded as the ``whitespace_pattern`` setting
  says (``[\\x20\\x0A\\x0D\\x09]{0,N}``).

Every string the model writes in JSON, like free text, can never contain ``<|``:
llama.cpp matches a special token's text against character rules, so that is what
keeps ``<|end|>`` and the reserved tokens out of a message. (A string with a length
bound writes ``|`` escaped, as ``\\u007c``.) Annotations (``title``,
``description``, ``default``, ``examples``, ...) are ignored.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from . import _gbnf_lexical as lexical
from ._base import UnsupportedConstraintError

_ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "x-guidance",
        "$defs",
        "definitions",
    }
)
#: The keywords that imply a type when ``type`` is absent.
_IMPLIED: Final = {
    "object": ("properties", "required", "additionalProperties"),
    "array": ("items", "prefixItems", "minItems", "maxItems"),
    "string": ("minLength", "maxLength", "pattern", "format"),
}
#: Every keyword this compiler reads (another is refused unless the schema is lenient).
_KEYWORDS: Final = _ANNOTATIONS.union(
    ("$ref", "enum", "const", "anyOf", "oneOf", "allOf", "type"),
    lexical.BOUND_KEYS,
    *_IMPLIED.values(),
)
_WS_PATTERN: Final = re.compile(r"^\[\\x20\\x0A\\x0D\\x09\]\{0,(\d+)\}$")
_TYPES: Final = ("object", "array", "string", "integer", "number", "boolean", "null")

#: Shared rules every compiled schema may use (one copy per grammar).
JSON_BASE: Final = "\n".join(
    [
        r'jsonx-esc ::= "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )',
        # A string without "<|": a run of '<' must be followed by something else.
        r'jsonx-string ::= "\"" ( jsonx-char | "<"+ jsonx-char-nobar )* "<"* "\""',
        r'jsonx-char ::= [^"\\<\x00-\x1f] | jsonx-esc',
        r'jsonx-char-nobar ::= [^"\\<|\x00-\x1f] | jsonx-esc',
        # For length-bounded strings: one character each, with '|' only escaped.
        r'jsonx-char-bounded ::= [^"\\|\x00-\x1f] | jsonx-esc',
        r'jsonx-int ::= "-"? jsonx-uint',
        r'jsonx-uint ::= "0" | [1-9] [0-9]*',
        r'jsonx-number ::= "-"? jsonx-unumber',
        r'jsonx-unumber ::= jsonx-uint ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?',
        r'jsonx-bool ::= "true" | "false"',
        r"jsonx-value ::= jsonx-object | jsonx-array | jsonx-string | jsonx-number | jsonx-bool"
        r' | "null"',
        r'jsonx-member ::= jsonx-string jsonx-ws ":" jsonx-ws jsonx-value',
        r'jsonx-object ::= "{" jsonx-ws ( jsonx-member jsonx-ws'
        r' ( "," jsonx-ws jsonx-member jsonx-ws )* )? "}"',
        r'jsonx-array ::= "[" jsonx-ws ( jsonx-value jsonx-ws'
        r' ( "," jsonx-ws jsonx-value jsonx-ws )* )? "]"',
    ]
)


def _unsupported(label: str, what: str) -> UnsupportedConstraintError:
    return UnsupportedConstraintError(
        f"llama.cpp cannot enforce this constraint: {label}: {what}", engine="llama.cpp"
    )


_LITERAL_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    out = [
        _LITERAL_ESCAPES.get(char)
        or (f"\\x{ord(char):02x}" if ord(char) < 0x20 or ord(char) == 0x7F else char)
        for char in text
    ]
    return '"' + "".join(out) + '"'


def whitespace_rule(schema: Any) -> str:
    """The GBNF body of JSON whitespace under ``schema``'s ``whitespace_pattern``."""
    guidance = schema.get("x-guidance") if isinstance(schema, dict) else None
    pattern = guidance.get("whitespace_pattern") if isinstance(guidance, dict) else None
    if pattern is None:
        return "[ \\t\\n\\r]*"
    match = _WS_PATTERN.match(pattern) if isinstance(pattern, str) else None
    if match is None:
        raise _unsupported("JSON whitespace", f"the whitespace pattern {pattern!r}")
    return f"[ \\t\\n\\r]{{0,{int(match[1])}}}"


class SchemaCompiler:
    """Compiles one schema into GBNF rules named ``<prefix>-...``; see the module docs."""

    def __init__(self, prefix: str, schema: Any, label: str) -> None:
        self.prefix = prefix
        self.label = label
        guidance = schema.get("x-guidance") if isinstance(schema, dict) else None
        guidance = guidance if isinstance(guidance, dict) else {}
        self.lenient = guidance.get("lenient") is True
        self.coerce_one_of = self.lenient or guidance.get("coerce_one_of") is True
        self.rules: dict[str, str] = {}
        self._refs: dict[tuple[int, str], str] = {}
        self._count = 0
        self.root_rule = self._new_name()
        self.rules[self.root_rule] = self._value(schema, schema)

    def gbnf(self) -> str:
        return "\n".join(f"{name} ::= {body}" for name, body in self.rules.items())

    # -- helpers ---------------------------------------------------------------------------

    def _new_name(self) -> str:
        self._count += 1
        return f"{self.prefix}-{self._count}"

    def _rule(self, body: str) -> str:
        name = self._new_name()
        self.rules[name] = body
        return name

    def _refuse(self, what: str) -> None:
        if not self.lenient:
            raise _unsupported(self.label, what)

    # -- schemas ---------------------------------------------------------------------------

    def _value(self, schema: Any, root: Any) -> str:
        """The GBNF body of a value of ``schema`` (``root`` resolves its ``$ref``)."""
        if schema is True or schema == {}:
            return "jsonx-value"
        if schema is False:
            raise _unsupported(self.label, "a schema that allows no value (false)")
        if not isinstance(schema, dict):
            raise _unsupported(self.label, f"{schema!r} is not a schema")
        if "$id" in schema and schema is not root:
            root = schema
        for key in schema:
            if key not in _KEYWORDS:
                self._refuse(f"the keyword {key!r} is not supported")
        if "$ref" in schema:
            if len(set(schema) - _ANNOTATIONS) > 1:
                self._refuse("keywords beside $ref")
            return self._ref(schema["$ref"], root)
        if "const" in schema:
            return self._literal(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise _unsupported(self.label, "enum must be a non-empty array")
            return lexical.group([self._literal(v) for v in values])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                if key == "oneOf" and not self.coerce_one_of:
                    raise _unsupported(
                        self.label, "oneOf (set GrammarOptions.lenient_schemas to read it as anyOf)"
                    )
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise _unsupported(self.label, f"{key} must be a non-empty array")
                rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
                if rest:
                    self._refuse(f"keywords beside {key} ({', '.join(rest)})")
                return lexical.group([self._rule(self._value(b, root)) for b in branches])
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                raise _unsupported(self.label, "allOf of more than one schema")
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self._value({**rest, **parts[0]}, root)
        types = schema.get("type")
        if types is None:
            types = [t for t in _IMPLIED if any(k in schema for k in _IMPLIED[t])] or list(_TYPES)
        elif isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types or any(t not in _TYPES for t in types):
            raise _unsupported(self.label, f"type {schema.get('type')!r}")
        bodies = [self._typed(t, schema, root) for t in types]
        return bodies[0] if len(bodies) == 1 else lexical.group([self._rule(b) for b in bodies])

    def _ref(self, ref: Any, root: Any) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _unsupported(self.label, f"$ref {ref!r} (only local references are supported)")
        key = (id(root), ref)
        if key in self._refs:
            return self._refs[key]
        target: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise _unsupported(self.label, f"$ref {ref!r} points at nothing")
            target = target[part]
        name = self._new_name()
        self._refs[key] = name
        self.rules[name] = "jsonx-value"  # placeholder, so recursion finds the name
        self.rules[name] = self._value(target, root)
        return name

    def _literal(self, value: Any) -> str:
        try:
            return gbnf_literal(json.dumps(value, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError):
            raise _unsupported(self.label, f"{value!r} is not JSON") from None

    def _typed(self, kind: str, schema: dict[str, Any], root: Any) -> str:
        if kind == "object":
            return self._object(schema, root)
        if kind == "array":
            return self._array(schema, root)
        if kind == "string":
            return self._string(schema)
        if kind in ("integer", "number"):
            return self._number(kind, schema)
        return "jsonx-bool" if kind == "boolean" else '"null"'

    def _string(self, schema: dict[str, Any]) -> str:
        text = self._lexical_string(schema)
        if text is not None:
            return text
        low, high = self._lengths(schema, "string", "minLength", "maxLength")
        if (low, high) == (0, None):
            return "jsonx-string"
        return f'"\\"" jsonx-char-bounded{_bounds(low, high)} "\\""'

    def _lengths(
        self, schema: dict[str, Any], what: str, low_key: str, high_key: str
    ) -> tuple[int, int | None]:
        low, high = schema.get(low_key, 0), schema.get(high_key)
        if not _count(low) or (high is not None and (not _count(high) or high < low)):
            raise _unsupported(self.label, f"{what} lengths {low!r}..{high!r}")
        return low, high

    def _lexical_string(self, schema: dict[str, Any]) -> str | None:
        """A string under ``pattern`` or ``format`` (``None``: neither applies)."""
        regex, form = schema.get("pattern"), schema.get("format")
        if regex is None and form is None:
            return None
        beside = [k for k in ("pattern", "format", "minLength", "maxLength") if k in schema]
        if len(beside) > 1:
            # One lexical rule each: their intersection has no GBNF form here.
            self._refuse(f"{' and '.join(beside)} together")
        try:
            if regex is not None:
                if not isinstance(regex, str):
                    raise _unsupported(self.label, f"pattern {regex!r} is not a string")
                body = lexical.pattern(regex)
            elif isinstance(form, str) and form in lexical.FORMATS:
                body = self._shared(f"format-{form}", lexical.FORMATS[form])
            else:
                self._refuse(f"format {form!r} (supported: {', '.join(lexical.FORMATS)})")
                return None
        except lexical.Unsupported as exc:
            self._refuse(str(exc))
            return None
        return f'"\\"" {body} "\\""' if body else '"\\"\\""'

    def _shared(self, name: str, body: str) -> str:
        """A rule written once per schema (``<prefix>-<name>``), by name."""
        rule = f"{self.prefix}-{name}"
        self.rules.setdefault(rule, body)
        return rule

    def _number(self, kind: str, schema: dict[str, Any]) -> str:
        signed = "jsonx-int" if kind == "integer" else "jsonx-number"
        if not any(schema.get(key) is not None for key in lexical.BOUND_KEYS):
            return signed
        try:
            if kind == "integer":
                return lexical.int_range(*lexical.integer_bounds(schema))
            return lexical.number_range(schema)
        except lexical.Unsupported as exc:
            self._refuse(str(exc))
        return signed

    def _array(self, schema: dict[str, Any], root: Any) -> str:
        low, high = self._lengths(schema, "array", "minItems", "maxItems")
        prefix = schema.get("prefixItems") or []
        if not isinstance(prefix, list):
            raise _unsupported(self.label, "prefixItems must be an array")
        if prefix and low < len(prefix):
            self._refuse("prefixItems that may be left out (minItems below their count)")
        if high is not None and high < len(prefix):
            raise _unsupported(self.label, "maxItems below the number of prefixItems")
        items = schema.get("items", True)
        parts = []
        for k, sub in enumerate(prefix):
            slot = self._rule(self._value(sub, root))
            parts.append(f"{slot} jsonx-ws" if k == 0 else f'"," jsonx-ws {slot} jsonx-ws')
        rest_low = max(low - len(prefix), 0)
        rest_high = None if high is None else high - len(prefix)
        if items is not False and rest_high != 0:
            item = self._rule(self._value(items, root))
            more = f'( "," jsonx-ws {item} jsonx-ws )'
            if parts:  # every further item follows a comma
                parts.append(f"{more}{_bounds(rest_low, rest_high)}")
            else:
                left = None if rest_high is None else max(rest_high - 1, 0)
                tail = f"{more}{_bounds(max(rest_low - 1, 0), left)}"
                body = f"{item} jsonx-ws {tail}"
                parts.append(body if rest_low else f"( {body} )?")
        elif rest_low:
            raise _unsupported(self.label, "minItems above the items the schema allows")
        return '"[" jsonx-ws ' + " ".join([*parts, '"]"'])

    def _object(self, schema: dict[str, Any], root: Any) -> str:
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        if not isinstance(properties, dict) or not isinstance(required, list):
            raise _unsupported(self.label, "properties must be an object and required an array")
        missing = [name for name in required if name not in properties]
        extra = schema.get("additionalProperties", True)
        if missing and extra is False:
            raise _unsupported(self.label, f"required properties {missing} are not allowed")
        props = [(name, name in required) for name in properties]
        props += [(name, True) for name in missing]  # required, any value
        members = []
        for name, is_required in props:
            value = self._value(properties.get(name, True), root)
            member = self._rule(f'{self._literal(name)} jsonx-ws ":" jsonx-ws {value}')
            members.append((member, is_required))
        extra_member = None
        if extra is not False:
            value = self._value(extra, root) if extra is not True else "jsonx-value"
            key = self._other_key([name for name, _ in props])
            extra_member = self._rule(f'{key} jsonx-ws ":" jsonx-ws {value}')
        if 0 < len(members) <= FREE_ORDER_MAX:
            first = self._any_order(members, extra_member)
        else:
            first = self._declared_order(members, extra_member)
        return f'"{{" jsonx-ws {first} "}}"'.replace("  ", " ")

    def _declared_order(self, members: list[tuple[str, bool]], extra: str | None) -> str:
        """The members in declared order, extra keys after each (the first member on)."""
        sep = '"," jsonx-ws'
        # rest: what may follow once a member was written; first: the first member on.
        rest, first = "", ""
        if extra is not None:
            rest = self._rule(f"( {sep} {extra} jsonx-ws )*")
            first = self._rule(f"( {extra} jsonx-ws {rest} )?")
        for member, is_required in reversed(members):
            written = f"{sep} {member} jsonx-ws {rest}".rstrip()
            starts = f"{member} jsonx-ws {rest}".rstrip()
            if is_required:
                rest, first = self._rule(written), self._rule(starts)
            else:
                rest = self._rule(f"( {written} ) | {rest}" if rest else f"( {written} )?")
                first = self._rule(f"( {starts} ) | {first}" if first else f"( {starts} )?")
        return first

    def _any_order(self, members: list[tuple[str, bool]], extra: str | None) -> str:
        """The members in any order, each at most once, the required ones all, extra keys
        anywhere: one rule per set of members written so far (so at most 2^n rules)."""
        required = sum(1 << i for i, (_, is_required) in enumerate(members) if is_required)
        after: dict[int, str] = {}

        def choice(written: int, sep: str) -> str:
            options = [
                f"{sep}{member} jsonx-ws {follow(written | 1 << i)}"
                for i, (member, _) in enumerate(members)
                if not written & 1 << i
            ]
            if extra is not None:
                options.append(f"{sep}{extra} jsonx-ws {follow(written)}")
            body = " | ".join(options)
            return f"( {body} )" if required & ~written else f"( {body} )?"

        def follow(written: int) -> str:
            # What may come once the members in `written` were: another member or an
            # extra key after a comma, or the end when every required member is in.
            if written in after:
                return after[written]
            name = after[written] = self._new_name()
            self.rules[name] = choice(written, '"," jsonx-ws ')
            return name

        return self._rule(choice(0, ""))

    def _other_key(self, names: list[str]) -> str:
        """A key that is none of ``names``: an extra key never repeats a declared one.

        Extra keys are written without escapes, ``<`` or ``|`` (so a key's text is the
        key, and compares with the declared names as written), as a walk along the
        declared names that leaves them before they end.
        """
        plain = '[^"\\\\<|\\x00-\\x1f'
        free = self._shared("key-rest", f'{plain}]* "\\""')
        spellable = sorted(
            {n for n in names if n and all(c not in '"\\<|' and ord(c) >= 0x20 for c in n)}
        )
        nodes: dict[str, str] = {}

        def node(prefix: str) -> str:
            if prefix in nodes:
                return nodes[prefix]
            name = nodes[prefix] = self._new_name()
            nexts = sorted(
                {n[len(prefix)] for n in spellable if n.startswith(prefix) and len(n) > len(prefix)}
            )
            options = [] if prefix in spellable else ['"\\""']
            options += [f"{gbnf_literal(c)} {node(prefix + c)}" for c in nexts]
            others = "".join(lexical.char_escape(ord(c)) for c in nexts)
            options.append(f"{plain}{others}] {free}")
            self.rules[name] = " | ".join(options)
            return name

        return f'"\\"" {node("")}'


#: Objects with at most this many declared properties take them in any order (one GBNF
#: rule per set of properties written: 2^n); larger ones in their declared order.
FREE_ORDER_MAX: Final = 6


def _bounds(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    return f"{{{low},{'' if high is None else high}}}"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
