"""Responses API: a request (``instructions``, ``input`` items, ``tools``) -> a conversation.

Input items map to harmony messages one to one: ``message`` (user text, or an
assistant text whose ``phase`` -- or, without one, whether a tool call follows
in its turn -- makes it a ``commentary`` preamble or a ``final`` answer),
``reasoning`` (``analysis``), ``function_call`` (a call to ``functions.<name>``,
or to a built-in tool when named ``browser.*`` / ``python`` or given that
``namespace``), ``function_call_output`` (paired with its call by ``call_id``),
``web_search_call`` (a ``browser.*`` call) and ``code_interpreter_call`` (a
``python`` call and, from its ``logs`` outputs, its result).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._content import ResponseFormat, ToolDescription, ToolNamespaceConfig
from .._encoding import HarmonyEncoding
from .._message import Conversation
from .._names import (
    BROWSER,
    BUILTIN_NAMESPACES,
    COMMENTARY,
    FINAL,
    FUNCTIONS,
    PYTHON,
    CotPolicyName,
)
from ._common import (
    DEFAULT_COT_POLICY,
    PromptOptions,
    arguments_text,
    as_list,
    as_mapping,
    assemble_conversation,
    calls_ahead,
    function_tool,
    join_text,
    opt_str,
    part_text,
    reasoning_effort,
    recipient_for,
    render_prompt,
    req_str,
    response_format,
    tool_name,
    unique_tools,
)
from ._errors import RequestError, UnknownRoleError, UnsupportedContentError
from ._history import Transcript

_MESSAGE_PARTS: Final = {"input_text": "text", "output_text": "text", "text": "text"}
_ASSISTANT_PARTS: Final = {**_MESSAGE_PARTS, "refusal": "refusal"}
_CALL_ITEMS: Final = frozenset({"function_call", "web_search_call", "code_interpreter_call"})
#: The Responses API's ``phase`` of an assistant text -> its harmony channel.
_PHASES: Final = {COMMENTARY: COMMENTARY, "final_answer": FINAL}


def responses_request_to_conversation(
    request: Mapping[str, Any], options: PromptOptions | None = None
) -> Conversation:
    """The harmony conversation for a Responses API request (a JSON dict).

    ``previous_response_id`` is not resolved here: put the stored items before
    ``input`` first. Raises :class:`RequestError` with the JSON path of anything
    that cannot be converted.

    >>> conv = responses_request_to_conversation(
    ...     {"instructions": "Be brief.", "input": "Hi", "tools": [{"type": "code_interpreter"}]})
    >>> [m.author.role.value for m in conv.messages]
    ['system', 'developer', 'user']
    >>> sorted(conv.messages[0].content[0].tools)
    ['python']
    """
    request = as_mapping(request, "request")
    options = options or PromptOptions()
    tools, builtins, namespaces = _tools(request)
    declared = frozenset(t.name for t in tools)
    offered, builtins = _offered(request.get("tool_choice"), tools, builtins)
    instructions = [opt_str(request, "instructions", "request") or ""]
    transcript = Transcript()
    items = _input_items(request.get("input"))
    ahead = calls_ahead(items, _turn_role)
    for i, raw in enumerate(items):
        path = f"input[{i}]"
        item = as_mapping(raw, path)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            _message(transcript, instructions, item, path, ahead[i])
        elif kind == "reasoning":
            transcript.reasoning(_reasoning_text(item, path))
        elif kind == "function_call":
            _function_call(transcript, item, path, declared)
        elif kind == "function_call_output":
            call_id = req_str(item, "call_id", path)
            transcript.result(call_id, _output_text(item, path), f"{path}.call_id")
        elif kind == "web_search_call":
            _web_search_call(transcript, item, path)
        elif kind == "code_interpreter_call":
            _code_interpreter_call(transcript, item, path)
        elif kind == "item_reference":
            raise UnsupportedContentError("resolve item references before converting", path)
        else:
            raise UnsupportedContentError(f"input item type {kind!r} is not supported", path)
    effort = reasoning_effort(_effort_value(request), "reasoning.effort")
    developer = (instructions, offered, _formats(request))
    return assemble_conversation(
        options, effort, builtins, developer, transcript.finish(), namespaces
    )


def render_responses_request(
    encoding: HarmonyEncoding,
    request: Mapping[str, Any],
    options: PromptOptions | None = None,
    *,
    cot_policy: CotPolicyName = DEFAULT_COT_POLICY,
) -> list[int]:
    """The prompt tokens for a Responses request, ending with ``<|start|>assistant``.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> enc.decode_utf8(render_responses_request(enc, {"input": "Hi"})[-7:])
    '<|start|>user<|message|>Hi<|end|><|start|>assistant'
    """
    conversation = responses_request_to_conversation(request, options)
    return render_prompt(encoding, conversation, cot_policy)


# -- request fields -------------------------------------------------------------------


def _effort_value(request: Mapping[str, Any]) -> object:
    reasoning = request.get("reasoning")
    if reasoning is None:
        return None
    return as_mapping(reasoning, "reasoning").get("effort")


def _tools(
    request: Mapping[str, Any],
) -> tuple[list[ToolDescription], list[str], list[ToolNamespaceConfig]]:
    """Function tools, the built-in tools (``browser``, ``python``) asked for, and the
    ``namespace`` tools (each a harmony namespace of its own)."""
    raw = request.get("tools")
    functions: list[tuple[str, ToolDescription]] = []
    builtins: list[str] = []
    namespaces: list[ToolNamespaceConfig] = []
    for i, entry in enumerate(as_list(raw, "tools") if raw is not None else ()):
        path = f"tools[{i}]"
        entry = as_mapping(entry, path)
        kind = entry.get("type")
        if kind == "function":
            functions.append((path, function_tool(entry, path)))
        elif isinstance(kind, str) and kind.startswith("web_search"):
            builtins.append(BROWSER)
        elif kind == "code_interpreter":
            builtins.append(PYTHON)
        elif kind == "namespace":
            namespaces.append(_namespace(entry, path, namespaces))
        else:
            raise UnsupportedContentError(
                f"tool type {kind!r} is not supported "
                "(function, namespace, web_search, code_interpreter)",
                f"{path}.type",
            )
    return unique_tools(functions), builtins, namespaces


def _namespace(
    entry: Mapping[str, Any], path: str, earlier: Sequence[ToolNamespaceConfig]
) -> ToolNamespaceConfig:
    """A ``namespace`` tool: its function tools, called as ``<name>.<tool>`` in harmony."""
    name = tool_name(entry.get("name"), f"{path}.name")
    if name in (FUNCTIONS, *BUILTIN_NAMESPACES) or "." in name:
        raise RequestError(
            f"namespace {name!r} is reserved or not one word (no '.'); choose another name",
            f"{path}.name",
        )
    if any(ns.name == name for ns in earlier):
        raise RequestError(f"namespace {name!r} is declared twice", f"{path}.name")
    description = opt_str(entry, "description", path)
    functions: list[tuple[str, ToolDescription]] = []
    for j, raw in enumerate(as_list(entry.get("tools"), f"{path}.tools")):
        inner = f"{path}.tools[{j}]"
        tool = as_mapping(raw, inner)
        if tool.get("type") != "function":
            raise UnsupportedContentError(
                f"tool type {tool.get('type')!r} is not supported in a namespace (function)",
                f"{inner}.type",
            )
        functions.append((inner, function_tool(tool, inner)))
    return ToolNamespaceConfig(name, description, unique_tools(functions))


def _offered(
    choice: object, tools: list[ToolDescription], builtins: list[str]
) -> tuple[list[ToolDescription], list[str]]:
    if choice == "none":
        return [], []
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return tools, builtins
    names, kinds = set(), set()
    for j, entry in enumerate(as_list(choice.get("tools"), "tool_choice.tools")):
        entry = as_mapping(entry, f"tool_choice.tools[{j}]")
        if entry.get("type") == "function":
            names.add(entry.get("name"))
        elif str(entry.get("type")).startswith("web_search"):
            kinds.add(BROWSER)
        elif entry.get("type") == "code_interpreter":
            kinds.add(PYTHON)
    return [t for t in tools if t.name in names], [b for b in builtins if b in kinds]


def _formats(request: Mapping[str, Any]) -> list[ResponseFormat]:
    text = request.get("text")
    fmt = None if text is None else as_mapping(text, "text").get("format")
    if fmt is None:
        return []
    parsed = response_format(as_mapping(fmt, "text.format"), "text.format", nested=False)
    return [] if parsed is None else [parsed]


def _input_items(raw: object) -> Sequence[Any]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return as_list(raw, "input")


def _turn_role(item: Mapping[str, Any]) -> str | None:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message" and item.get("role") == "user":
        return "user"
    return "call" if kind in _CALL_ITEMS else None


# -- items ----------------------------------------------------------------------------


def _message(
    transcript: Transcript,
    instructions: list[str],
    item: Mapping[str, Any],
    path: str,
    call_ahead: bool,
) -> None:
    """``call_ahead``: a tool call follows in this turn (an assistant text without a
    ``phase`` is then a ``commentary`` preamble)."""
    role = item.get("role")
    content = item.get("content")
    if role in ("system", "developer"):
        instructions.append(join_text(content, f"{path}.content", _MESSAGE_PARTS))
    elif role == "user":
        transcript.user(join_text(content, f"{path}.content", _MESSAGE_PARTS))
    elif role == "assistant":
        phase = item.get("phase")
        default = COMMENTARY if call_ahead else FINAL
        channel = _PHASES.get(phase, FINAL) if isinstance(phase, str) else default
        transcript.assistant_text(join_text(content, f"{path}.content", _ASSISTANT_PARTS), channel)
    else:
        raise UnknownRoleError(f"unknown role {role!r}", f"{path}.role")


def _reasoning_text(item: Mapping[str, Any], path: str) -> str:
    """The reasoning's text (its ``content``, or failing that its ``summary``)."""
    content = item.get("content")
    if content:
        return join_text(content, f"{path}.content", {"reasoning_text": "text"})
    summary = item.get("summary")
    if not summary:
        return ""
    parts = as_list(summary, f"{path}.summary")
    keys = {"summary_text": "text"}
    texts = [part_text(p, f"{path}.summary[{j}]", keys) for j, p in enumerate(parts)]
    return "\n\n".join(t for t in texts if t)


def _function_call(
    transcript: Transcript, item: Mapping[str, Any], path: str, declared: frozenset[str]
) -> None:
    name = req_str(item, "name", path)
    namespace = opt_str(item, "namespace", path)
    if namespace is None:
        recipient = recipient_for(name, declared)
    elif namespace == PYTHON and name == PYTHON:
        recipient = PYTHON
    else:
        recipient = f"{namespace}.{name}"
    arguments = arguments_text(item.get("arguments"), f"{path}.arguments")
    transcript.call(req_str(item, "call_id", path), recipient, arguments, f"{path}.call_id")


def _output_text(item: Mapping[str, Any], path: str) -> str:
    output = item.get("output")
    if output is None:
        raise RequestError("missing", f"{path}.output")
    return join_text(output, f"{path}.output", _MESSAGE_PARTS)


def _web_search_call(transcript: Transcript, item: Mapping[str, Any], path: str) -> None:
    """A web search becomes the browser call it stands for (no result: the API has none)."""
    action = as_mapping(item.get("action"), f"{path}.action")
    kind = action.get("type")
    args: dict[str, Any]
    if kind == "search":
        query = action.get("query")
        queries = action.get("queries")
        if query is None and isinstance(queries, list) and queries:
            query = queries[0]
        recipient, args = "browser.search", {"query": query or ""}
    elif kind == "open_page":
        url = action.get("url")
        recipient, args = "browser.open", ({} if url is None else {"id": url})
    elif kind in ("find", "find_in_page"):
        recipient, args = "browser.find", {"pattern": action.get("pattern") or ""}
    else:
        raise UnsupportedContentError(f"web search action {kind!r}", f"{path}.action.type")
    arguments = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    transcript.call(req_str(item, "id", path), recipient, arguments, f"{path}.id")


def _code_interpreter_call(transcript: Transcript, item: Mapping[str, Any], path: str) -> None:
    """A python call, and its result from the ``logs`` outputs (if any)."""
    call_id = req_str(item, "id", path)
    transcript.call(call_id, PYTHON, opt_str(item, "code", path) or "", f"{path}.id")
    outputs = item.get("outputs")
    if not outputs:
        return
    logs = join_text(outputs, f"{path}.outputs", {"logs": "logs"})
    transcript.result(call_id, logs, f"{path}.outputs")
