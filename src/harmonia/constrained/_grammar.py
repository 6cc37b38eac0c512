"""The grammar of the next assistant turn, built from the conversation it continues.

The prompt ends with ``<|start|>assistant``; the turn the model writes next is

* any number of ``analysis`` messages (free text, optionally bounded in tokens),
* then any number of ``commentary`` preambles (free text),
* then either one tool call to a *declared* tool, ended by ``<|call|>``, or the
  ``final`` answer (free text, or JSON matching the response format), ended by
  ``<|return|>``.

Every message after the first begins with ``<|start|>assistant`` (the first one's
was in the prompt). The grammar is written in llguidance's Lark dialect: special
tokens by id (``<[200007]>``), so text that merely spells ``<|end|>`` is content
and never ends a message; tool arguments and structured answers as inline JSON
schemas (``%json {...}``).

Header shapes (what the text between the special tokens may be) follow the
renderer exactly, plus the form gpt-oss itself writes; both parse to the same
message with harmonia's parser:

==================  ===========================================================
message             header after ``<|start|>assistant``
==================  ===========================================================
analysis            ``<|channel|>analysis<|message|>``
preamble            ``<|channel|>commentary<|message|>``
final               ``<|channel|>final<|message|>`` (with a response format
                    also ``<|channel|>final <|constrain|>json<|message|>``)
function call       `` to=functions.f<|channel|>commentary <|constrain|>json``
                    (the renderer's form) or ``<|channel|>commentary
                    to=functions.f <|constrain|>json`` (the model's form)
built-in call       the same two placements, channel ``analysis`` or
                    ``commentary``; content type `` code``,
                    `` <|constrain|>json`` (browser only) or none
==================  ===========================================================

:class:`GrammarOptions` narrows this (``recipient_placement="role"`` keeps the
model to the renderer's form, so a parsed turn re-renders to the same tokens).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from .._content import DEFAULT_CHANNELS, DeveloperContent, SystemContent, ToolNamespaceConfig
from .._errors import InputError, check_choice, check_int
from .._message import Conversation
from .._names import ANALYSIS, CODE, COMMENTARY, CONSTRAIN, CONSTRAIN_JSON, FINAL
from .._tokenizer import special_tokens as st
from .._turn import BUILTIN_CALL_CHANNELS, FUNCTION_CALL_CHANNELS
from ._keys import KeyGuard

RecipientPlacement = Literal["both", "role", "channel"]
ToolChoice = Literal["auto", "required", "none"]
#: A JSON value in the grammar: what it is (for errors), its schema text.
JsonSlot = tuple[str, str]


# Where calls are made: the turn layer's rules (FUNCTION_CALL_CHANNELS, BUILTIN_CALL_CHANNELS),
# so the grammar allows what the assembler reads as calls.
_FUNCTION_CONTENT_TYPES: Final[tuple[str | None, ...]] = (CONSTRAIN_JSON,)
_BUILTIN_JSON_CONTENT_TYPES: Final[tuple[str | None, ...]] = (CODE, CONSTRAIN_JSON, None)
_BUILTIN_TEXT_CONTENT_TYPES: Final[tuple[str | None, ...]] = (CODE, None)

#: Arguments of a tool declared without parameters (``type f = () => any``).
_NO_ARGUMENTS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}
_JSON_WHITESPACE: Final = "[\\x20\\x0A\\x0D\\x09]"
# A recipient is one header word: no whitespace (it would split the word) and no
# special-token text (the parser reads headers as text).
_BAD_RECIPIENT: Final = re.compile(r"\s|<\|")
_PLACEMENTS: Final = get_args(RecipientPlacement)
_TOOL_CHOICES: Final = get_args(ToolChoice)


@dataclass(frozen=True, slots=True)
class GrammarOptions:
    """How strict the turn grammar is, beyond what the conversation declares.

    * ``recipient_placement``: where a tool call's ``to=`` may stand: ``"both"``
      (default), ``"role"`` (the renderer's ``<|start|>assistant to=R<|channel|>``,
      so a parsed call re-renders to the same tokens) or ``"channel"`` (gpt-oss's
      ``<|channel|>commentary to=R``).
    * ``tool_choice``: ``"auto"`` (a tool call or a final answer), ``"required"``
      (a call to any declared tool), ``"none"`` (a final answer), or one tool's
      recipient (a call to that tool and no other: ``"functions.get_weather"``,
      ``"browser.search"``, ``"python"``; a bare function name such as
      ``"get_weather"`` means ``functions.get_weather``, as Chat's
      ``{"type": "function", "function": {"name": ...}}`` does).
    * ``analysis_max_tokens``: at most this many tokens per analysis message.
      (llguidance cannot roll back inside such a bound, so rollback replays.)
    * ``json_max_whitespace``: at most this many whitespace characters between
      two JSON tokens; ``None`` for no bound. A bound keeps a model from looping
      on newlines inside JSON; 32 admits compact, ``", "`` and indented JSON.
    * ``lenient_schemas``: let llguidance ignore schema keywords and formats it
      does not implement (and read ``oneOf`` as ``anyOf``) instead of refusing
      the schema; the JSON it allows may then break those keywords.
    """

    recipient_placement: RecipientPlacement = "both"
    tool_choice: ToolChoice | str = "auto"
    analysis_max_tokens: int | None = None
    json_max_whitespace: int | None = 32
    lenient_schemas: bool = False

    def __post_init__(self) -> None:
        check_choice(self.recipient_placement, _PLACEMENTS, "recipient_placement")
        if not isinstance(self.tool_choice, str) or not self.tool_choice:
            raise InputError(
                f"tool_choice must be one of {_TOOL_CHOICES} or a tool's name, "
                f"not {self.tool_choice!r}"
            )
        check_int("analysis_max_tokens", self.analysis_max_tokens, minimum=1, optional=True)
        check_int("json_max_whitespace", self.json_max_whitespace, minimum=0, optional=True)


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """One tool the model may call, and how its call message may look.

    ``schema`` is the JSON Schema of the arguments, or ``None`` for free text
    (the ``python`` tool); ``where`` says where it was declared (for errors).
    """

    recipient: str
    channels: tuple[str, ...]
    content_types: tuple[str | None, ...]
    schema: dict[str, Any] | None
    where: str


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """Everything the grammar is built from, read off a conversation."""

    channels: tuple[str, ...]
    tools: tuple[ToolCallSpec, ...]  # the tools the model may call (none for tool_choice="none")
    response_formats: tuple[tuple[str, dict[str, Any]], ...]
    options: GrammarOptions

    @property
    def allows_final(self) -> bool:
        return FINAL in self.channels and self.options.tool_choice in ("auto", "none")


# -- reading the conversation -----------------------------------------------------------


def turn_spec(conversation: Conversation, options: GrammarOptions | None = None) -> TurnSpec:
    """Read the declared channels, tools and response formats off ``conversation``.

    Later declarations win: the last system content's channel config, and for a
    recipient declared twice, the later tool.
    """
    options = options or GrammarOptions()
    channels: tuple[str, ...] = DEFAULT_CHANNELS
    tools: dict[str, ToolCallSpec] = {}
    formats: dict[str, dict[str, Any]] = {}
    for i, message in enumerate(conversation.messages):
        for j, part in enumerate(message.content):
            where = f"message {i}, content[{j}]"
            if isinstance(part, SystemContent):
                cc = part.channel_config
                if cc is not None and cc.valid_channels:
                    channels = tuple(cc.valid_channels)
                for ns in (part.tools or {}).values():
                    tools.update((t.recipient, t) for t in _builtin_tools(ns, where))
            elif isinstance(part, DeveloperContent):
                for ns in (part.tools or {}).values():
                    typed = _typed_tools(ns, where, FUNCTION_CALL_CHANNELS, _FUNCTION_CONTENT_TYPES)
                    tools.update((t.recipient, t) for t in typed)
                for fmt in part.response_formats or ():
                    formats[fmt.name] = _schema_dict(
                        fmt.schema, f"{where}, response format {fmt.name!r}"
                    )
    if options.tool_choice == "none":
        tools = {}
    elif options.tool_choice not in _TOOL_CHOICES:
        recipient = _chosen_tool(options.tool_choice, tools)
        tools = {recipient: tools[recipient]}
    spec = TurnSpec(
        channels=tuple(c for c in (ANALYSIS, COMMENTARY, FINAL) if c in channels),
        tools=tuple(_restrict_channels(t, channels) for t in tools.values()),
        response_formats=tuple(formats.items()),
        options=options,
    )
    if not spec.allows_final and not spec.tools:
        raise InputError(
            "the assistant's turn could not end: no final answer is allowed "
            f"(channels {list(channels)}, tool_choice={options.tool_choice!r}) "
            "and no tool can be called"
        )
    return spec


def _chosen_tool(choice: str, tools: dict[str, ToolCallSpec]) -> str:
    """The recipient ``tool_choice`` names: a recipient, or a function's bare name."""
    for recipient in (choice, f"functions.{choice}"):
        if recipient in tools:
            return recipient
    declared = ", ".join(tools) or "none"
    raise InputError(
        f"tool_choice={choice!r} names no declared tool (declared: {declared}); give a "
        f"recipient such as 'functions.f', or one of {_TOOL_CHOICES}"
    )


def _builtin_tools(ns: ToolNamespaceConfig, where: str) -> Iterable[ToolCallSpec]:
    """Tools of a system namespace: typed ones (browser) take JSON; a namespace
    without typed tools (python) is itself the recipient and takes free text."""
    if not ns.tools:
        recipient = _recipient((ns.name,), f"{where}, tools {ns.name!r}")
        return [
            ToolCallSpec(recipient, BUILTIN_CALL_CHANNELS, _BUILTIN_TEXT_CONTENT_TYPES, None, where)
        ]
    return _typed_tools(ns, where, BUILTIN_CALL_CHANNELS, _BUILTIN_JSON_CONTENT_TYPES)


def _typed_tools(
    ns: ToolNamespaceConfig,
    where: str,
    channels: tuple[str, ...],
    content_types: tuple[str | None, ...],
) -> Iterable[ToolCallSpec]:
    """One call spec per declared tool, its arguments checked against its schema."""
    for k, tool in enumerate(ns.tools):
        recipient = _recipient((ns.name, tool.name), f"{where}, tools {ns.name!r}[{k}]")
        schema = _NO_ARGUMENTS if tool.parameters is None else tool.parameters
        yield ToolCallSpec(
            recipient,
            channels,
            content_types,
            _schema_dict(schema, f"tool {recipient} (parameters)"),
            where,
        )


def _restrict_channels(tool: ToolCallSpec, declared: Sequence[str]) -> ToolCallSpec:
    channels = tuple(c for c in tool.channels if c in declared)
    if not channels:
        raise InputError(
            f"tool {tool.recipient} ({tool.where}) must be called on "
            f"{' or '.join(tool.channels)}, but the system message declares only the "
            f"channels {list(declared)}"
        )
    return dataclasses.replace(tool, channels=channels)


def _recipient(names: Sequence[str], where: str) -> str:
    """``namespace.tool`` (or a lone namespace), checked to be one header word."""
    for name in names:
        if not name or _BAD_RECIPIENT.search(name):
            raise InputError(
                f"tool name {name!r} ({where}) cannot be written in a message header: "
                "it must be non-empty, without whitespace or '<|'"
            )
    return ".".join(names)


def _schema_dict(schema: object, label: str) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise InputError(f"{label}: a JSON Schema object is required, got {schema!r}")
    return schema


# -- writing the grammar --------------------------------------------------------------------

Piece = str | int  # text, or a special token id


def _lark_sequence(pieces: Sequence[Piece]) -> str:
    """Lark for pieces: adjacent texts merged into one literal, specials by id."""
    out: list[str] = []
    text = ""
    for piece in pieces:
        if isinstance(piece, str):
            text += piece
            continue
        if text:
            out.append(_literal(text))
            text = ""
        out.append(f"<[{piece}]>")
    if text:
        out.append(_literal(text))
    return " ".join(out)


def _literal(text: str) -> str:
    # Only '"' and '\' need escaping (recipients hold no whitespace or controls,
    # and the fixed header words are ASCII); non-ASCII is written as itself.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _content_type_pieces(content_type: str | None) -> list[Piece]:
    # Exactly what the renderer writes for a content type.
    if content_type is None:
        return []
    if content_type.startswith(CONSTRAIN):
        return [" ", st.CONSTRAIN, content_type[len(CONSTRAIN) :]]
    return [" " + content_type]


def call_headers(tool: ToolCallSpec, placement: RecipientPlacement) -> list[list[Piece]]:
    """Every header a call to ``tool`` may have, from after the role to ``<|message|>``."""
    headers = []
    for channel in tool.channels:
        for content_type in tool.content_types:
            tail = [*_content_type_pieces(content_type), st.MESSAGE]
            if placement in ("both", "role"):
                headers.append([" to=" + tool.recipient, st.CHANNEL, channel, *tail])
            if placement in ("both", "channel"):
                headers.append([st.CHANNEL, f"{channel} to={tool.recipient}", *tail])
    return headers


class _Writer:
    """Accumulates rules; one instance per grammar."""

    def __init__(self, spec: TurnSpec) -> None:
        self.spec = spec
        self.rules: list[str] = []
        self.json_slots: list[JsonSlot] = []

    def rule(self, name: str, alternatives: Sequence[str], comment: str | None = None) -> None:
        if comment:
            self.rules.append(f"// {comment}")
        pad = " " * len(name)
        self.rules.append(f"{name}: {alternatives[0]}")
        self.rules.extend(f"{pad}| {alt}" for alt in alternatives[1:])

    def json_rule(self, name: str, schema: dict[str, Any], label: str) -> None:
        _check_key_names(schema, label)
        text = _json_text(schema, label, self.spec.options)
        self.json_slots.append((label, text))
        self.rules.append(f"{name}: %json {text}")

    def message_rule(self, name: str, channel: str, body: str, end: int) -> None:
        head = _lark_sequence([st.CHANNEL, channel, st.MESSAGE])
        self.rule(name, [f"{head} {body} <[{end}]>"])


# Characters JSON must escape in a string: a key holding one cannot be written under
# the key rule (keys without escapes; see _keys.py).
_NEEDS_ESCAPE: Final = re.compile(r'["\\\x00-\x1f]')


def _check_key_names(schema: object, label: str) -> None:
    """Refuse a schema that names a property the key rule could never write."""
    if isinstance(schema, list):
        for item in schema:
            _check_key_names(item, label)
        return
    if not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    named = list(properties) if isinstance(properties, dict) else []
    if isinstance(schema.get("required"), list):
        named += [n for n in schema["required"] if isinstance(n, str)]
    for name in named:
        if _NEEDS_ESCAPE.search(name):
            raise InputError(
                f"{label}: property name {name!r} needs an escape in JSON (a quote, a "
                "backslash or a control character), and harmonia writes keys without "
                "escapes so that every parser reads them alike; rename the property"
            )
    for value in schema.values():
        _check_key_names(value, label)


#: The JSON settings (``x-guidance``) each llguidance line knows; a setting a version
#: does not know makes it refuse the whole grammar (``unknown field``).
_JSON_SETTINGS_1_7: Final = frozenset(
    {
        "item_separator",
        "key_separator",
        "whitespace_flexible",
        "whitespace_pattern",
        "coerce_one_of",
        "lenient",
        "json_allowed_escapes",
    }
)
_JSON_SETTINGS_1_9: Final = _JSON_SETTINGS_1_7 | {"json_allow_general_unicode_escapes"}
#: The oldest llguidance harmonia writes grammars for (vLLM 0.32 and 0.33 pin 1.7.x).
OLDEST_LLGUIDANCE: Final = (1, 7)
_JSON_LINE: Final = re.compile(
    r"^(?P<head>[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?: %json )(?P<json>.*)$", re.MULTILINE
)


def parse_llguidance_version(version: str | tuple[int, int]) -> tuple[int, int]:
    """``"1.7"``, ``"1.7.6"`` or ``(1, 7)`` as ``(major, minor)``; InputError otherwise."""
    if isinstance(version, tuple):
        parts: list[str] = [str(v) for v in version]
    elif isinstance(version, str):
        parts = version.split("+")[0].split(".")
    else:
        parts = []
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise InputError(
            f"an llguidance version is 'MAJOR.MINOR' (such as '1.7'), not {version!r}"
        ) from None
    if (major, minor) < OLDEST_LLGUIDANCE:
        raise InputError(
            f"llguidance {major}.{minor} is older than harmonia supports "
            f"({OLDEST_LLGUIDANCE[0]}.{OLDEST_LLGUIDANCE[1]})"
        )
    return major, minor


@functools.lru_cache(maxsize=1)
def installed_llguidance() -> tuple[int, int]:
    """The installed llguidance's ``(major, minor)``; the oldest supported if none is."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return parse_llguidance_version(version("llguidance"))
    except (PackageNotFoundError, InputError):
        return OLDEST_LLGUIDANCE


def grammar_for_llguidance(lark: str, version: str | tuple[int, int]) -> str:
    """``lark`` with each ``%json`` schema's settings cut to what ``version`` knows.

    Turn grammars are written for the llguidance installed here; a server may run
    another (vLLM 0.32 and 0.33 ship 1.7.x, which refuses a grammar naming a 1.9-only
    setting). Dropping ``json_allow_general_unicode_escapes`` keeps the meaning: 1.7
    allows every JSON escape by default. Lines other than ``rule: %json {...}`` are kept
    as they are.

    >>> settings = '{"json_allow_general_unicode_escapes": true, "lenient": true}'
    >>> grammar_for_llguidance('a: %json {"x-guidance": ' + settings + '}', "1.7")
    'a: %json {"x-guidance": {"lenient": true}}'
    """
    new = parse_llguidance_version(version) >= (1, 9)
    known = _JSON_SETTINGS_1_9 if new else _JSON_SETTINGS_1_7
    return _JSON_LINE.sub(lambda match: match["head"] + _json_for(match["json"], known), lark)


def _json_for(text: str, known: frozenset[str]) -> str:
    try:
        schema = json.loads(text)
    except ValueError:
        return text  # not one JSON value on the line: leave it to llguidance to report
    if not isinstance(schema, dict) or not isinstance(schema.get("x-guidance"), dict):
        return text
    guidance = {k: v for k, v in schema["x-guidance"].items() if k in known}
    if len(guidance) == len(schema["x-guidance"]):
        return text
    if guidance:
        schema["x-guidance"] = guidance
    else:
        del schema["x-guidance"]
    return json.dumps(schema, allow_nan=False)


def _json_text(schema: dict[str, Any], label: str, options: GrammarOptions) -> str:
    """The schema as JSON, with llguidance's JSON options added (``x-guidance``)."""
    guidance: dict[str, Any] = {}
    if installed_llguidance() >= (1, 9):
        # \uXXXX escapes are valid JSON and what json.dumps writes by default (llguidance
        # 1.9 accepts only control characters escaped unless told otherwise; 1.7 accepts
        # every escape and does not know the setting).
        guidance["json_allow_general_unicode_escapes"] = True
    if options.json_max_whitespace is not None:
        bound = f"{_JSON_WHITESPACE}{{0,{options.json_max_whitespace}}}"
        guidance["whitespace_pattern"] = bound
    if options.lenient_schemas:
        guidance["lenient"] = True
    guidance.update(schema.get("x-guidance") or {})  # the schema's own settings win
    try:
        return json.dumps({**schema, "x-guidance": guidance}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{label}: the schema is not valid JSON: {exc}") from None


def _write(spec: TurnSpec) -> _Writer:
    w = _Writer(spec)
    start = []
    if ANALYSIS in spec.channels:
        start.append("(analysis next)*")
    # Preambles come before tool calls. With a response format and no tool to call the
    # answer is the structured one alone: a preamble would be text beside it (Chat
    # Completions shows both in ``content``).
    preambles = COMMENTARY in spec.channels and (bool(spec.tools) or not spec.response_formats)
    if preambles:
        start.append("(preamble next)*")
    start.append("ending")
    w.rule("start", [" ".join(start)])
    w.rule("next", [_lark_sequence([st.START, "assistant"])])
    if ANALYSIS in spec.channels:
        bounded = spec.options.analysis_max_tokens is not None
        w.message_rule(ANALYSIS, ANALYSIS, "analysis_text" if bounded else "TEXT", st.END)
        if bounded:
            w.rule(f"analysis_text[max_tokens={spec.options.analysis_max_tokens}]", ["TEXT"])
    if preambles:
        w.message_rule("preamble", COMMENTARY, "TEXT", st.END)
    endings = []
    if spec.allows_final:
        endings.append(FINAL)
        _write_final(w, spec)
    for i, tool in enumerate(spec.tools, 1):
        endings.append(f"call_{i}")
        _write_call(w, tool, f"call_{i}", f"args_{i}")
    w.rule("ending", endings)
    w.rules.append("TEXT: /(?s:.*)/")
    # Last: which messages hold JSON, for the key rule (see _keys.py).
    json_recipients = [tool.recipient for tool in spec.tools if tool.schema is not None]
    final_json = spec.allows_final and bool(spec.response_formats)
    w.rules.append(KeyGuard.marker(json_recipients, final_json))
    return w


def _write_final(w: _Writer, spec: TurnSpec) -> None:
    if not spec.response_formats:
        w.message_rule(FINAL, FINAL, "TEXT", st.RETURN)
        return
    end = f"<[{st.RETURN}]>"
    plain = _lark_sequence([st.CHANNEL, FINAL, st.MESSAGE])
    typed = _lark_sequence([st.CHANNEL, FINAL, *_content_type_pieces(CONSTRAIN_JSON), st.MESSAGE])
    w.rule(FINAL, [f"{plain} final_json {end}", f"{typed} final_json {end}"])
    if len(spec.response_formats) == 1:
        [(fmt_name, schema)] = spec.response_formats
        w.rule("final_json", ["format_1"])
        w.json_rule("format_1", schema, f"response format {fmt_name!r}")
        return
    # Several formats are one %json of an anyOf, never alternatives of several %json
    # rules: llguidance lets such alternatives start with JSON whitespace (which one
    # %json refuses), and with an analysis_max_tokens bound that path panics.
    for fmt_name, schema in spec.response_formats:
        # Only to name a schema llguidance refuses (the grammar never uses these rules).
        label = f"response format {fmt_name!r}"
        w.json_slots.append((label, _json_text(schema, label, spec.options)))
    names = ", ".join(repr(name) for name, _ in spec.response_formats)
    w.rule("final_json", ["any_format"])
    w.json_rule("any_format", _any_of_formats(spec.response_formats), f"response formats {names}")


def _any_of_formats(formats: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One schema matching any of ``formats``, each keeping its own ``$ref`` root.

    A subschema with an ``$id`` is a resource of its own: its ``#/...`` references
    resolve against it, not against the ``anyOf`` around it (JSON Schema 2020-12,
    which llguidance and ``jsonschema`` implement). Each format's ``x-guidance``
    settings move to the top, where llguidance reads them (later formats win).
    """
    guidance: dict[str, Any] = {}
    branches = []
    for k, (_, schema) in enumerate(formats, 1):
        branch = {key: value for key, value in schema.items() if key != "x-guidance"}
        branch.setdefault("$id", f"urn:harmonia:response-format:{k}")
        guidance.update(schema.get("x-guidance") or {})
        branches.append(branch)
    combined: dict[str, Any] = {"anyOf": branches}
    if guidance:
        combined["x-guidance"] = guidance
    return combined


def _write_call(w: _Writer, tool: ToolCallSpec, rule: str, args: str) -> None:
    body = "TEXT" if tool.schema is None else args
    alternatives = [
        f"{_lark_sequence(header)} {body} <[{st.CALL}]>"
        for header in call_headers(tool, w.spec.options.recipient_placement)
    ]
    w.rule(rule, alternatives, tool.recipient)
    if tool.schema is not None:
        w.json_rule(args, tool.schema, f"tool {tool.recipient} (parameters)")


_PREAMBLE: Final = f"""\
%llguidance {{}}
// One gpt-oss assistant turn in the harmony format, generated by harmonia from the
// conversation it continues; it starts right after the prompt's <|start|>assistant.
// Special tokens are matched by id: <[{st.START}]> <|start|>, <[{st.CHANNEL}]> <|channel|>,
// <[{st.CONSTRAIN}]> <|constrain|>, <[{st.MESSAGE}]> <|message|>, <[{st.END}]> <|end|>,
// <[{st.CALL}]> <|call|>, <[{st.RETURN}]> <|return|>.
"""


@dataclass(frozen=True, slots=True)
class TurnGrammar:
    """A turn grammar: its Lark text, and its JSON values (to explain errors)."""

    lark: str
    json_slots: tuple[JsonSlot, ...]


def compile_turn(conversation: Conversation, options: GrammarOptions | None = None) -> TurnGrammar:
    """The grammar of the next assistant turn, with what it was built from."""
    w = _write(turn_spec(conversation, options))
    return TurnGrammar(_PREAMBLE + "\n".join(w.rules) + "\n", tuple(w.json_slots))


def build_turn_grammar(conversation: Conversation, options: GrammarOptions | None = None) -> str:
    """The Lark grammar (llguidance's dialect) of the next assistant turn.

    ``conversation`` is what the prompt was rendered from; its system and
    developer messages declare the channels, tools and response formats. Raises
    :class:`~harmonia.InputError` for declarations no grammar can follow (a tool
    name with whitespace, a channel list that leaves no way to end the turn).

    >>> from harmonia import Conversation, Message, Role
    >>> conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])
    >>> print(build_turn_grammar(conv).splitlines()[6])
    start: (analysis next)* (preamble next)* ending
    """
    return compile_turn(conversation, options).lark
