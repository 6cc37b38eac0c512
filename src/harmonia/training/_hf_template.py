"""The ``hf`` dialect: token ids byte-exact with the gpt-oss Hugging Face chat template.

TRL, Axolotl and others render gpt-oss data with the ``chat_template.jinja`` that
ships with the checkpoints, which is not byte-exact with harmony
(docs/training.md lists the differences). This module writes the same text the
template writes for a Hugging Face ``messages`` row, without jinja2, and keeps
the provenance of every token, so the masks of :mod:`._sample` apply unchanged.
The tests render the template itself with jinja2 and compare the ids.

What the template does, and so this module: the system message is harmony's
(the date line always present), the first system/developer message becomes
``# Instructions`` with a blank line after it, tools are written as the
template's TypeScript, a tool call is ``<|start|>assistant to=functions.NAME
<|channel|>commentary json<|message|>`` with the arguments and tool results
JSON-encoded (``tojson``), only ``tool_calls[0]`` is rendered, and reasoning is
rendered only on tool calls with no final answer after them and on a last
message that is a final answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from harmonia import (
    Author,
    HarmonyEncoding,
    Message,
    MessageSpans,
    ReasoningEffort,
    RenderOptions,
    Role,
    SpanRecord,
    SystemContent,
)
from harmonia.vocabulary import (
    ANALYSIS,
    CALL_TEXT,
    CHANNEL_TEXT,
    COMMENTARY,
    END_TEXT,
    FINAL,
    MESSAGE_TEXT,
    RETURN_TEXT,
    START_TEXT,
)

from ._faithful import turn_ids
from ._inputs import is_mapping, tools_from_json
from ._policy import TrainPolicy, resolve_policy
from ._problems import RowError
from ._sample import FULL, TrainSample, finish_sample, mask_from_spans

_INDENT: Final = " " * 16  # whitespace the template's macros leak into the output
_DEFAULT_INDENT: Final = " " * 20
#: The JSON Schema types the template writes as a TypeScript word.
_SIMPLE: Final = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean"}
_K = TypeVar("_K")
_V = TypeVar("_V")


def _tojson(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise RowError("E150", f"{where} must be a string for the hf dialect, got {value!r}")
    return value


def typescript_type(spec: Mapping[str, Any], required: Sequence[str]) -> str:
    """The template's ``render_typescript_type`` macro."""
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        out = "any[]"
        if items:
            inner_kind = items.get("type") if isinstance(items, Mapping) else None
            if isinstance(inner_kind, str) and inner_kind in _SIMPLE:
                out = _SIMPLE[inner_kind] + "[]"
            else:
                inner = typescript_type(items, required)
                out = "any[]" if inner == "object | object" or len(inner) > 50 else inner + "[]"
        return out + (" | null" if spec.get("nullable") else "")
    if isinstance(kind, (list, tuple)) and kind:
        return " | ".join(map(str, kind)) if len(kind) > 1 else str(kind[0])
    variants = spec.get("oneOf")
    if variants:
        # The template's "any" fallback for object variants never fires: a variable
        # set inside a jinja loop does not outlive it.
        out = ""
        for k, variant in enumerate(variants):
            out += typescript_type(variant, required)
            if variant.get("description"):
                out += "// " + _text(variant["description"], "a variant's description")
            if "default" in variant:
                out += _DEFAULT_INDENT + "// default: " + _tojson(variant["default"])
            if k < len(variants) - 1:
                out += " | \n"
        return out
    if kind == "string":
        if spec.get("enum"):
            return '"' + '" | "'.join(map(str, spec["enum"])) + '"'
        return "string" + (" | null" if spec.get("nullable") else "")
    if isinstance(kind, str) and kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "object":
        properties = spec.get("properties")
        if not properties:
            return "object"
        needed = spec.get("required") or []
        members = []
        for name, value in properties.items():
            optional = "" if name in needed else "?"
            members.append(name + optional + ": \n" + _INDENT + typescript_type(value, needed))
        return "{\n" + ", ".join(members) + "}"
    return "any"


def _namespace(tools: Sequence[Any]) -> str:
    """:func:`_tool_namespace`, kept by the tools' JSON text (rows share tool sets)."""
    try:
        key = json.dumps(tools, sort_keys=False)
    except (TypeError, ValueError):
        return _tool_namespace(tools)
    return _cached(_NAMESPACES, key, lambda: _tool_namespace(tools))


def _tool_namespace(tools: Sequence[Any]) -> str:
    out = "## functions\n\nnamespace functions {\n\n"
    for entry in tools:
        tool = entry.get("function", entry) if isinstance(entry, Mapping) else {}
        out += "// " + _text(tool.get("description"), "a tool's description") + "\n"
        out += "type " + _text(tool.get("name"), "a tool's name") + " = "
        parameters = tool.get("parameters") or {}
        properties = parameters.get("properties")
        if not properties:
            out += "() => any;\n\n"
            continue
        needed = parameters.get("required") or []
        out += "(_: {\n"
        for name, spec in properties.items():
            if spec.get("description"):
                out += "// " + _text(spec["description"], f"{name}'s description") + "\n"
            out += name + ("" if name in needed else "?") + ": " + typescript_type(spec, needed)
            if "default" in spec:
                if spec.get("enum"):
                    out += ", // default: " + _text(spec["default"], f"{name}'s default")
                elif spec.get("oneOf"):
                    out += "// default: " + _text(spec["default"], f"{name}'s default")
                else:
                    out += ", // default: " + _tojson(spec["default"])
            out += ",\n"
        out += "}) => any;\n\n"
    return out + "} // namespace functions"


_CACHE_LIMIT: Final = 4096
# Keyed by the encoding's name, a value: one name is one vocabulary, so the ids are the
# same whichever object or BPE engine encodes them.
# name -> (the encoding, special ids, header runs, repeated bodies)
_Runs = dict[tuple[str, str], tuple[list[int], int]]
_WRITER_CACHE: dict[str, tuple[HarmonyEncoding, dict[str, int], _Runs, dict[str, list[int]]]] = {}
# (name, date, effort, identity, browser, python, has tools) -> system text
_SYSTEM_TEXT: dict[tuple[Any, ...], str] = {}
_BUILTINS: Final = ("browser", "python")
# the tools' JSON text -> the template's namespace text
_NAMESPACES: dict[str, str] = {}


def _cached(cache: dict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """``cache[key]``, made first when missing; a full cache starts again empty."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        value = cache[key] = make()
    return value


class _Writer:
    """Appends messages part by part; text between two special tokens is encoded
    as one string (as a tokenizer does with the template's text)."""

    def __init__(self, encoding: HarmonyEncoding) -> None:
        self.encoding = encoding
        known = _WRITER_CACHE.get(encoding.name)
        if known is None:
            texts = (START_TEXT, CHANNEL_TEXT, MESSAGE_TEXT, END_TEXT, CALL_TEXT, RETURN_TEXT)
            special = {text: encoding.encode(text, allowed_special="all")[0] for text in texts}
            known = _WRITER_CACHE[encoding.name] = (encoding, special, {}, {})
        _, self.special, self._runs, self._texts = known
        self.ids: list[int] = []
        self.spans: list[SpanRecord] = []
        # Every message of the row as harmony (rendered or not), the row message it
        # came from (-1: the system message), and the reasoning the template left out.
        self.messages: list[Message] = []
        self.origin: list[int] = []
        self.dropped: set[int] = set()

    def add(self, message: Message, source: int) -> int:
        """Describe a message of row message ``source``; its index."""
        self.messages.append(message)
        self.origin.append(source)
        return len(self.messages) - 1

    def _run(self, pieces: tuple[str, str]) -> int:
        """Encode two texts as one string; where the second starts.

        Header runs repeat from row to row (``assistant``, `` to=functions.f``), so
        their ids and offsets are kept."""
        whole, split = _cached(self._runs, pieces, lambda: self._split(*pieces))
        base = len(self.ids)
        self.ids += whole
        return base + split

    def _split(self, first: str, second: str) -> tuple[list[int], int]:
        whole = self.encoding.encode_ordinary(first + second)
        # The second text starts on a token boundary when encoding the first alone
        # gives a prefix of the whole; otherwise it joins the first's tokens.
        ids = self.encoding.encode_ordinary(first) if first else []
        return whole, len(ids) if whole[: len(ids)] == ids else 0

    def body(self, text: str, keep: bool) -> list[int]:
        """A message body's ids; ``keep`` for texts that repeat (system, developer)."""
        if not keep:
            return self.encoding.encode_ordinary(text)
        return _cached(self._texts, text, lambda: self.encoding.encode_ordinary(text))

    def message(
        self,
        index: int,
        role: str,
        recipient: str,
        channel: str | None,
        content_type: str,
        body: str,
        terminator: str,
    ) -> None:
        start = len(self.ids)
        self.ids.append(self.special[START_TEXT])
        at_recipient = self._run((role, recipient))
        at_channel = at_type = len(self.ids)
        if channel is not None:
            self.ids.append(self.special[CHANNEL_TEXT])
            at_type = self._run((channel, content_type))
        at_message = len(self.ids)
        self.ids.append(self.special[MESSAGE_TEXT])
        self.ids += self.body(body, role in ("system", "developer"))
        self.ids.append(self.special[terminator])
        offsets = (at_recipient - start, at_channel - start, at_type - start, at_message - start)
        self.spans.append((index, start, offsets, len(self.ids)))


def render_hf(
    row: Mapping[str, Any],
    encoding: HarmonyEncoding,
    *,
    date: str,
    reasoning_effort: str | None = None,
    add_generation_prompt: bool = False,
) -> tuple[list[int], list[SpanRecord], list[Message], frozenset[int], list[int]]:
    """The template's ids for a ``messages`` row, with provenance.

    Returns the ids, one span per rendered message, harmony messages describing
    every message (rendered or not), the indices of the reasoning the template
    left out, and for each harmony message the index of the row message it came from.
    """
    rows = row.get("messages")
    if not isinstance(rows, list) or not rows:
        raise RowError("E102", "'messages' is missing or empty")
    tools = tools_from_json(row).get("tools") or []  # JSON text too (TRL's datasets)
    given = row.get("chat_template_kwargs")
    kwargs: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    effort = str(kwargs.get("reasoning_effort") or reasoning_effort or "medium")
    builtins = list(kwargs.get("builtin_tools") or [])
    identity = kwargs.get("model_identity")
    writer = _Writer(encoding)

    # The system message: harmony's text, which the template reproduces, with the date.
    system = SystemContent.new().with_conversation_start_date(date)
    try:
        system = system.with_reasoning_effort(ReasoningEffort(effort.capitalize()))
    except ValueError:
        raise RowError("E150", f"unknown reasoning effort {effort!r}") from None
    if identity is not None:
        system = system.with_model_identity(_text(identity, "model_identity"))
    if "browser" in builtins:
        system = system.with_browser_tool()
    if "python" in builtins:
        system = system.with_python_tool()
    system_message = Message.from_role_and_content(Role.SYSTEM, system)

    def system_text() -> str:
        options = RenderOptions(conversation_has_function_tools=bool(tools))
        text = encoding.decode(encoding.render(system_message, options))
        return text[len(START_TEXT + Role.SYSTEM.value + MESSAGE_TEXT) : -len(END_TEXT)]

    key = (encoding.name, date, effort, identity, *(b in builtins for b in _BUILTINS), bool(tools))
    text = _cached(_SYSTEM_TEXT, key, system_text)
    writer.message(writer.add(system_message, -1), "system", "", None, "", text, END_TEXT)

    first = rows[0] if isinstance(rows[0], Mapping) else {}
    loop = rows
    instructions = ""
    if first.get("role") in ("developer", "system"):
        instructions = _text(first.get("content"), "the first message's content")
        loop = rows[1:]
    if instructions or tools:
        text = "# Instructions\n\n" + instructions + "\n\n" if instructions else ""
        text += ("# Tools\n\n" + _namespace(tools)) if tools else ""
        developer = Message.from_role_and_content(Role.DEVELOPER, text)
        writer.message(writer.add(developer, 0), "developer", "", None, "", text, END_TEXT)

    offset = len(rows) - len(loop)
    # The last assistant message without tool calls (a final answer): a call's
    # reasoning is shown only when no final comes after it.
    last_final = -1
    for j, m in enumerate(loop):
        if is_mapping(m) and m.get("role") == "assistant" and "tool_calls" not in m:
            last_final = j
    last_call: str | None = None
    for k, message in enumerate(loop):
        source = k + offset
        if not is_mapping(message):
            raise RowError("E150", f"messages[{source}] is not an object")
        role = message.get("role")
        if role == "assistant":
            last = k == len(loop) - 1 and not add_generation_prompt
            last_call = _assistant(writer, message, source, last, last_final > k)
        elif role == "tool":
            if last_call is None:
                raise RowError(
                    "E130", f"messages[{source}] is a tool result with no tool call before it"
                )
            content = _tojson(message.get("content"))
            name = "functions." + last_call
            tool = Message.from_author_and_content(Author.new(Role.TOOL, name), content)
            index = writer.add(tool.with_recipient("assistant").with_channel(COMMENTARY), source)
            writer.message(index, name, " to=assistant", COMMENTARY, "", content, END_TEXT)
        elif role == "user":
            text = _text(message.get("content"), f"messages[{source}].content")
            index = writer.add(Message.from_role_and_content(Role.USER, text), source)
            writer.message(index, "user", "", None, "", text, END_TEXT)
    ids = writer.ids
    if add_generation_prompt:
        ids += [writer.special[START_TEXT], *encoding.encode_ordinary("assistant")]
    return ids, writer.spans, writer.messages, frozenset(writer.dropped), writer.origin


def _assistant(
    writer: _Writer, message: Mapping[str, Any], source: int, last: bool, later_final: bool
) -> str | None:
    """Write one assistant message as the template does; the call's name, if any.

    ``last``: the row's last message (without a generation prompt after it);
    ``later_final``: a final answer follows it in the row."""
    content = message.get("content")
    thinking = message.get("thinking")
    tags = [f"{CHANNEL_TEXT}{channel}{MESSAGE_TEXT}" for channel in (ANALYSIS, FINAL)]
    if any(isinstance(v, str) and any(t in v for t in tags) for v in (content, thinking)):
        raise RowError("E150", f"messages[{source}] holds <|channel|> tags in its text")

    def reasoning(text: str, shown: bool) -> None:
        analysis = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(ANALYSIS)
        index = writer.add(analysis, source)
        if shown:
            writer.message(index, "assistant", "", ANALYSIS, "", text, END_TEXT)
        else:
            writer.dropped.add(index)

    if "tool_calls" in message:
        calls = message.get("tool_calls") or []
        if not calls:
            raise RowError("E150", f"messages[{source}].tool_calls is empty")
        call = calls[0]
        if isinstance(call, Mapping) and call.get("function"):
            call = call["function"]
        if content and thinking:
            raise RowError(
                "E150", f"messages[{source}] has both content and thinking next to a tool call"
            )
        text = content or thinking
        if text:
            reasoning(_text(text, f"messages[{source}].content"), not later_final)
        name = _text(call.get("name"), f"messages[{source}].tool_calls[0].name")
        content_type = str(call.get("content_type", "json"))
        arguments = _tojson(call.get("arguments"))
        recipient = "functions." + name
        invocation = (
            Message.from_role_and_content(Role.ASSISTANT, arguments)
            .with_channel(COMMENTARY)
            .with_recipient(recipient)
            .with_content_type(content_type)
        )
        index = writer.add(invocation, source)
        to, typed = " to=" + recipient, " " + content_type  # as the template spaces them
        writer.message(index, "assistant", to, COMMENTARY, typed, arguments, CALL_TEXT)
        return name
    text = _text(content, f"messages[{source}].content")
    if "thinking" in message:
        reasoning(_text(thinking, f"messages[{source}].thinking"), last)
    answer = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(FINAL)
    index = writer.add(answer, source)
    writer.message(index, "assistant", "", FINAL, "", text, RETURN_TEXT if last else END_TEXT)
    return None


def render_hf_for_training(
    row: Mapping[str, Any],
    encoding: HarmonyEncoding,
    policy: TrainPolicy | str | None = None,
    *,
    date: str,
    reasoning_effort: str | None = None,
) -> list[TrainSample]:
    """Training samples of a Hugging Face ``messages`` row in the ``hf`` dialect.

    The ids are the chat template's; the mask is the policy's, from the same
    provenance as in harmony. The template decides which reasoning is rendered
    (the policy's ``cot`` does not apply) and ends the last final with
    ``<|return|>``; ``turns="expand"`` needs the harmony dialect. Row messages may
    carry a ``weight``.
    """
    policy = resolve_policy(policy)
    if policy.turns == "expand":
        raise RowError("E150", "turns='expand' needs the harmony dialect")
    ids, spans, messages, dropped, origin = render_hf(
        row, encoding, date=date, reasoning_effort=reasoning_effort
    )
    rows = row["messages"]
    weights: list[float | None] | None = None
    if any(isinstance(m, Mapping) and "weight" in m for m in rows):
        weights = [rows[o].get("weight") if o >= 0 else None for o in origin]
    if policy.full_sequence:
        mask = b"\x01" * len(ids)
        reasons = tuple(FULL for _ in messages)
    else:
        turns = turn_ids(messages)
        mask, reasons = mask_from_spans(
            messages, spans, ids, dropped, turns, policy, weights, None, frozenset()
        )
    sample = finish_sample(ids, mask, MessageSpans(spans), reasons, policy, 0)
    return [] if sample is None else [sample]
