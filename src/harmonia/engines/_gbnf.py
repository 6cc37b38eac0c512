"""harmonia's turn grammar (llguidance Lark) rewritten as llama.cpp GBNF.

The turn grammars :func:`harmonia.constrained.build_turn_grammar` writes use a
small part of Lark: rules of alternatives of sequences, groups with ``*``,
``?``, ``+``, string literals, special tokens by id (``<[200005]>``, which
llama.cpp's GBNF reads the same way since its PR #17816), free text
(``/(?s:.*)/``), and ``%json {schema}`` for tool arguments and response
formats. Everything but ``%json`` and token-bounded rules
(``[max_tokens=N]``) has an exact GBNF form.

``%json`` needs a JSON-schema compiler, which llama-server applies only to a
whole output (its ``json_schema`` field), never to a rule inside a grammar.
So by default a grammar with ``%json`` is refused with
:class:`UnsupportedConstraintError`; with ``json_args="any"`` each schema is
replaced by "any JSON value": the harmony structure, the tool names and
JSON syntax are still enforced, the schemas are not.
"""

from __future__ import annotations

import json
import re
from typing import Final, Literal

from ._base import UnsupportedConstraintError

JsonPolicy = Literal["refuse", "any"]

_RULE: Final = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\s*:\s*(.*)$")
_TOKEN: Final = re.compile(
    r'\s*(?:(?P<special><\[\d+\]>)|(?P<string>"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
    r"|(?P<op>[()|*+?]))"
)
#: Free text: any characters. llama.cpp keeps special tokens out of text rules,
#: as llguidance does, so only the listed token ids can produce them.
_FREE_TEXT: Final = "/(?s:.*)/"
_JSON_ANY: Final = "\n".join(
    [
        r"json-value ::= json-object | json-array | json-string | json-number"
        r' | "true" | "false" | "null"',
        r'json-member ::= json-string json-ws ":" json-ws json-value json-ws',
        r'json-object ::= "{" json-ws ( json-member ( "," json-ws json-member )* )? "}"',
        r"json-item ::= json-value json-ws",
        r'json-array ::= "[" json-ws ( json-item ( "," json-ws json-item )* )? "]"',
        r'json-char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )',
        r'json-string ::= "\"" json-char* "\""',
        r'json-number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?',
        r"json-ws ::= [ \t\n\r]{0,32}",
    ]
)


def _unsupported(what: str) -> UnsupportedConstraintError:
    return UnsupportedConstraintError(
        f"llama.cpp cannot enforce this constraint: {what}", engine="llama.cpp"
    )


def _name(lark_name: str) -> str:
    # GBNF names are letters, digits and '-'; Lark's start rule is GBNF's root.
    return "root" if lark_name == "start" else lark_name.replace("_", "-")


def _string(literal: str) -> str:
    try:
        text = json.loads(literal)
    except ValueError:
        raise _unsupported(f"string literal {literal} is not plain JSON-escaped text") from None
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _expression(body: str, rule: str) -> str:
    out: list[str] = []
    position = 0
    body = body.rstrip()
    while position < len(body):
        match = _TOKEN.match(body, position)
        if match is None:
            rest = body[position:].strip()
            raise _unsupported(f"rule {rule}: cannot translate {rest[:60]!r} to GBNF")
        position = match.end()
        if match["special"]:
            out.append(match["special"])
        elif match["string"]:
            out.append(_string(match["string"]))
        elif match["name"]:
            out.append(_name(match["name"]))
        else:
            out.append(match["op"])
    # Postfix operators stick to what they repeat, as in llama.cpp's own grammars.
    return re.sub(r"\( | (?=[)*+?])", lambda m: m.group(0).strip(), " ".join(out))


def lark_to_gbnf(lark: str, *, json_args: JsonPolicy = "refuse") -> str:
    """GBNF for a turn grammar, or :class:`UnsupportedConstraintError` naming what cannot be.

    >>> print(lark_to_gbnf('start: <[200005]> "final" <[200008]> TEXT <[200002]>\\n'
    ...                    'TEXT: /(?s:.*)/'))
    root ::= <[200005]> "final" <[200008]> TEXT <[200002]>
    TEXT ::= [^\\x00]*
    """
    rules: list[tuple[str, str]] = []
    needs_json = False
    for raw in lark.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", "%llguidance")):
            continue
        if line[0].isspace():
            if not stripped.startswith("|") or not rules:
                raise _unsupported(f"cannot translate the line {stripped[:60]!r}")
            name, body = rules[-1]
            rules[-1] = (name, f"{body} {stripped}")
            continue
        match = _RULE.match(line)
        if match is None:
            raise _unsupported(f"cannot translate the line {stripped[:60]!r}")
        name, attributes, body = match.groups()
        if attributes:
            raise _unsupported(
                f"rule {name} is bounded in tokens ({attributes}); GBNF has no token bounds "
                "(leave GrammarOptions.analysis_max_tokens unset for llama.cpp)"
            )
        rules.append((name, body))

    out: list[str] = []
    for name, body in rules:
        if body.startswith("%json"):
            if json_args == "refuse":
                raise _unsupported(
                    f"rule {name} is a JSON schema (tool arguments or a response format); "
                    "llama-server cannot apply a schema inside a grammar. Pass "
                    "json_args='any' to LlamaCppEngine to enforce JSON syntax without the schema"
                )
            needs_json = True
            out.append(f"{_name(name)} ::= json-value")
        elif body.startswith("/"):
            if body != _FREE_TEXT:
                raise _unsupported(f"rule {name}: the regular expression {body[:60]!r}")
            out.append(f"{_name(name)} ::= [^\\x00]*")
        else:
            out.append(f"{_name(name)} ::= {_expression(body, name)}")
    if not any(name == "start" for name, _ in rules):
        raise _unsupported("the grammar has no start rule")
    if needs_json:
        out.append(_JSON_ANY)
    return "\n".join(out)
