"""harmonia's turn grammar (llguidance Lark) rewritten as llama.cpp GBNF.

The turn grammars :func:`harmonia.constrained.build_turn_grammar` writes use a
small part of Lark: rules of alternatives of sequences, groups with ``*``,
``?``, ``+``, string literals, special tokens by id (``<[200005]>``, which
llama.cpp's GBNF reads the same way since its PR #17816), free text
(``/(?s:.*)/``), and ``%json {schema}`` for tool arguments and response
formats. Three things differ from a word-for-word translation, each because of
how llama.cpp runs a grammar:

* **No stop ids.** llama-server treats ``<|return|>``, ``<|call|>`` and
  ``<|endoftext|>`` as end-of-generation and masks them until the grammar is
  complete, so a grammar that itself requires ``<[200002]>`` or ``<[200012]>``
  can never be satisfied. The GBNF ends where the answer or the call ends; the
  engine then checks (and repairs) which end id the server stopped on
  (:func:`expected_end`).
* **Free text cannot spell a special token.** llama.cpp matches a special
  token's text (``<|end|>``, ``<|reserved_200100|>``) against character rules, so
  ``[^\x00]*`` would let them into a message; free text is text without ``<|``.
* **JSON schemas are compiled to GBNF** (:mod:`._json_gbnf`), since llama-server
  applies a schema only to a whole output. ``json_args="any"`` enforces JSON syntax
  only; ``json_args="refuse"`` refuses any constraint with a schema.

Token-bounded rules (``[max_tokens=N]``) have no GBNF form and are refused.
"""

from __future__ import annotations

import json
import re
from typing import Final, Literal

from .._tokenizer import special_tokens as st
from ._base import UnsupportedConstraintError
from ._json_gbnf import JSON_BASE, SchemaCompiler, gbnf_literal, whitespace_rule

JsonPolicy = Literal["schema", "any", "refuse"]

_RULE: Final = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\s*:\s*(.*)$")
_TOKEN: Final = re.compile(
    r'\s*(?:(?P<special><\[\d+\]>)|(?P<string>"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)'
    r"|(?P<op>[()|*+?]))"
)
_FREE_TEXT: Final = "/(?s:.*)/"
#: Free text without "<|": a run of '<' is followed by something else, or ends the text.
_TEXT_BODY: Final = r'( [^<\x00] | "<"+ [^<|\x00] )* "<"*'
#: The ids llama-server ends a generation on (end-of-generation in the gpt-oss GGUF).
END_OF_GENERATION: Final = frozenset({st.RETURN, st.CALL, st.ENDOFTEXT})
_STOP_REFERENCES: Final = re.compile(rf"\s*<\[(?:{st.RETURN}|{st.CALL})\]>")


def _unsupported(what: str) -> UnsupportedConstraintError:
    return UnsupportedConstraintError(
        f"llama.cpp cannot enforce this constraint: {what}", engine="llama.cpp"
    )


def _name(lark_name: str) -> str:
    # GBNF names are letters, digits and '-'; Lark's start rule is GBNF's root.
    return "root" if lark_name == "start" else lark_name.replace("_", "-")


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
            try:
                out.append(gbnf_literal(json.loads(match["string"])))
            except ValueError:
                literal = match["string"]
                raise _unsupported(
                    f"string literal {literal} is not plain JSON-escaped text"
                ) from None
        elif match["name"]:
            out.append(_name(match["name"]))
        else:
            out.append(match["op"])
    # Postfix operators stick to what they repeat, as in llama.cpp's own grammars.
    return re.sub(r"\( | (?=[)*+?])", lambda m: m.group(0).strip(), " ".join(out))


def lark_to_gbnf(lark: str, *, json_args: JsonPolicy = "schema") -> str:
    """GBNF for a turn grammar, or :class:`UnsupportedConstraintError` naming what cannot be.

    >>> print(lark_to_gbnf('start: <[200005]> "final" <[200008]> TEXT <[200002]>\\n'
    ...                    'TEXT: /(?s:.*)/'))
    root ::= <[200005]> "final" <[200008]> TEXT
    TEXT ::= ( [^<\\x00] | "<"+ [^<|\\x00] )* "<"*
    """
    rules: list[tuple[str, str]] = []
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
    schemas: list[SchemaCompiler] = []
    whitespace: str | None = None
    for name, body in rules:
        if body.startswith("%json"):
            try:
                schema = json.loads(body[len("%json") :])
            except ValueError:
                raise _unsupported(f"rule {name}: the %json schema is not JSON") from None
            if json_args == "refuse":
                raise _unsupported(
                    f"rule {name} is a JSON schema (tool arguments or a response format), "
                    "and this LlamaCppEngine was made with json_args='refuse'"
                )
            whitespace = whitespace or whitespace_rule(schema)
            if json_args == "any":
                out.append(f"{_name(name)} ::= jsonx-value")
                continue
            compiler = SchemaCompiler(f"{_name(name)}-json", schema, f"rule {name}")
            schemas.append(compiler)
            out.append(f"{_name(name)} ::= {compiler.root_rule}")
        elif body.startswith("/"):
            if body != _FREE_TEXT:
                raise _unsupported(f"rule {name}: the regular expression {body[:60]!r}")
            out.append(f"{_name(name)} ::= {_TEXT_BODY}")
        else:
            # The stop ids stay out: llama-server ends on them itself (see the module docs).
            body = _STOP_REFERENCES.sub("", body)
            out.append(f"{_name(name)} ::= {_expression(body, name)}")
    if not any(name == "start" for name, _ in rules):
        raise _unsupported("the grammar has no start rule")
    out.extend(compiler.gbnf() for compiler in schemas)
    if whitespace is not None:
        out.append(JSON_BASE)
        out.append(f"jsonx-ws ::= {whitespace}")
    return "\n".join(out)


def expected_end(tokens: list[int] | tuple[int, ...], token_bytes: list[bytes]) -> int:
    """The stop id the turn in ``tokens`` must end with, by the harmony format.

    The last message's header says it: a message to a recipient (``to=`` in the
    header) is a tool call and ends with ``<|call|>``; anything else that ends a turn
    is the final answer and ends with ``<|return|>``. (The turn grammars allow no
    other way to end.)
    """
    start = 0
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] == st.START:
            start = i + 1
            break
    header = bytearray()
    for token in tokens[start:]:
        if token == st.MESSAGE:
            break
        if not st.is_special_token(token):
            header += token_bytes[token]
    return st.CALL if b"to=" in header else st.RETURN
