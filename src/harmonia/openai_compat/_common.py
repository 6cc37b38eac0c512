"""Request-side helpers shared by the Chat Completions and Responses converters.

Reading JSON values with paths for errors, text parts, reasoning effort, tool
arguments, tool declarations, and building the system and developer messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .._content import (
    DeveloperContent,
    ResponseFormat,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from .._encoding import HarmonyEncoding
from .._enums import ReasoningEffort, Role
from .._message import Conversation, Message, RenderConversationConfig
from .._names import BROWSER, BUILTIN_NAMESPACES, FUNCTIONS, PYTHON, CotPolicyName
from .._names import DEFAULT_COT_POLICY as DEFAULT_COT_POLICY
from .._turn import is_builtin_name
from ._errors import RequestError, UnsupportedContentError

#: Compact JSON text, as ``harmonia serve`` writes every body and SSE payload (one
#: encoder for all: ``json.dumps`` with options builds a new one per call).
compact_json: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

JsonDict = dict[str, Any]

_EFFORTS: Final[dict[str, ReasoningEffort]] = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
}
# Names that survive a harmony header (no whitespace, no special-token text).
_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.:\-]+")


@dataclass(frozen=True)
class PromptOptions:
    """What the API request does not say but the harmony system message does.

    ``None`` keeps harmony's default (the gpt-oss identity, knowledge cutoff
    ``2024-06``, no current date). ``builtin_tools`` declares gpt-oss's built-in
    ``"browser"`` and/or ``"python"`` tools in the system message (a Responses
    request also declares those its ``tools`` ask for). ``reasoning_effort`` is
    used when the request gives none.
    """

    model_identity: str | None = None
    conversation_start_date: str | None = None
    knowledge_cutoff: str | None = None
    builtin_tools: tuple[str, ...] = ()
    reasoning_effort: str | None = None

    def __post_init__(self) -> None:
        for name in self.builtin_tools:
            if name not in BUILTIN_NAMESPACES:
                raise RequestError(
                    f"unknown built-in tool {name!r}: choose from {', '.join(BUILTIN_NAMESPACES)}",
                    "builtin_tools",
                )


# -- reading JSON ---------------------------------------------------------------


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def as_mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RequestError(f"expected an object, got {type_name(value)}", path)
    return value


def as_list(value: object, path: str) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)):
        raise RequestError(f"expected an array, got {type_name(value)}", path)
    return value


def opt_str(raw: Mapping[str, Any], key: str, path: str) -> str | None:
    value = raw.get(key)
    if value is None or isinstance(value, str):
        return value
    raise RequestError(f"expected a string, got {type_name(value)}", f"{path}.{key}")


def req_str(raw: Mapping[str, Any], key: str, path: str) -> str:
    value = opt_str(raw, key, path)
    if value is None:
        raise RequestError("missing", f"{path}.{key}")
    return value


def join_text(content: object, path: str, text_keys: Mapping[str, str]) -> str:
    """The text of a ``content`` value: a string, null, or an array of parts.

    ``text_keys`` maps each accepted part type to the key holding its text
    (``{"text": "text"}`` for Chat). Parts are concatenated as they are: the API
    treats them as one text. Any other part (an image, audio, a file) raises
    :class:`UnsupportedContentError` naming it.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = as_list(content, path)
    return "".join(part_text(part, f"{path}[{i}]", text_keys) for i, part in enumerate(parts))


def part_text(part: object, path: str, text_keys: Mapping[str, str]) -> str:
    """The text of one content part (see :func:`join_text`)."""
    if isinstance(part, str):
        return part
    part = as_mapping(part, path)
    kind = part.get("type")
    key = text_keys.get(kind) if isinstance(kind, str) else None
    if key is None:
        raise UnsupportedContentError(
            f"content part of type {kind!r} cannot be expressed in harmony "
            f"(gpt-oss reads text only; accepted: {', '.join(text_keys)})",
            path,
        )
    return req_str(part, key, path)


# -- small conversions ------------------------------------------------------------


def reasoning_effort(value: object, path: str) -> ReasoningEffort | None:
    """An API reasoning effort (``minimal``/``none`` read as low, ``xhigh`` as high)."""
    if value is None:
        return None
    effort = _EFFORTS.get(value.lower()) if isinstance(value, str) else None
    if effort is None:
        raise RequestError(
            f"unknown reasoning effort {value!r}: choose from {', '.join(_EFFORTS)}", path
        )
    return effort


def arguments_text(value: object, path: str) -> str:
    """Tool-call arguments as the JSON text the model writes, encoded exactly once.

    A string is kept byte for byte (it is what the model wrote), except that an
    empty one becomes ``{}`` and a JSON string holding JSON (a double-encoded
    object) is unwrapped. An object or array is serialised compactly.

    >>> arguments_text('{"a": 1}', "x"), arguments_text({"a": "é"}, "x")
    ('{"a": 1}', '{"a":"é"}')
    >>> arguments_text('"{\\\\"a\\\\":1}"', "x")
    '{"a":1}'
    """
    if value is None:
        return "{}"
    if isinstance(value, str):
        if not value.strip():
            return "{}"
        return _unwrap_double_encoded(value)
    if isinstance(value, (Mapping, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"arguments are not JSON-serialisable: {exc}", path) from None
    raise RequestError(
        f"arguments must be a JSON string or an object, not {type_name(value)}", path
    )


def _unwrap_double_encoded(text: str) -> str:
    try:
        inner = json.loads(text)
    except ValueError:
        return text
    if isinstance(inner, str):
        try:
            if isinstance(json.loads(inner), (dict, list)):
                return inner
        except ValueError:
            pass
    return text


def tool_name(value: object, path: str) -> str:
    if not isinstance(value, str) or not _TOOL_NAME.fullmatch(value):
        raise RequestError(
            f"tool name {value!r} must be letters, digits, '_', '-', '.' or ':'", path
        )
    return value


def function_tool(spec: Mapping[str, Any], path: str) -> ToolDescription:
    """The function ``spec`` declares (``description`` and ``parameters`` are optional)."""
    checked = tool_name(spec.get("name"), f"{path}.name")
    description, parameters = opt_str(spec, "description", path), spec.get("parameters")
    if parameters is not None:
        parameters = dict(as_mapping(parameters, f"{path}.parameters"))
        _check_json(parameters, f"{path}.parameters")
    return ToolDescription(checked, description or "", parameters)


def _check_json(value: object, path: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RequestError(f"not valid JSON: {exc}", path) from None


def response_format(fmt: Mapping[str, Any], path: str, *, nested: bool) -> ResponseFormat | None:
    """A structured-output format, or ``None`` for plain text.

    ``nested`` is Chat's shape (``{"type": "json_schema", "json_schema": {...}}``);
    otherwise the Responses shape (``{"type": "json_schema", "name": ..., "schema": ...}``).
    ``json_object`` becomes a format named ``json_object`` with schema
    ``{"type": "object"}``.
    """
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return ResponseFormat("json_object", {"type": "object"})
    if kind != "json_schema":
        raise UnsupportedContentError(f"unknown response format type {kind!r}", f"{path}.type")
    body_path = f"{path}.json_schema" if nested else path
    body = as_mapping(fmt.get("json_schema"), body_path) if nested else fmt
    name = tool_name(body.get("name"), f"{body_path}.name")
    schema_value = body.get("schema")
    schema = {} if schema_value is None else dict(as_mapping(schema_value, f"{body_path}.schema"))
    _check_json(schema, f"{body_path}.schema")
    return ResponseFormat(name, schema, opt_str(body, "description", body_path))


# -- tool recipients ----------------------------------------------------------------


def recipient_for(name: str, declared: frozenset[str]) -> str:
    """The harmony recipient of an API tool call named ``name``.

    Declared functions win; otherwise ``python`` and ``browser.*`` are the
    built-in tools; anything else is a function.
    """
    if name not in declared and is_builtin_name(name):
        return name
    return f"{FUNCTIONS}.{name}"


# -- system and developer messages ----------------------------------------------------


def system_message(
    options: PromptOptions, effort: ReasoningEffort | None, builtins: Sequence[str]
) -> Message:
    content = SystemContent.new()
    if options.model_identity is not None:
        content.with_model_identity(options.model_identity)
    if options.knowledge_cutoff is not None:
        content.with_knowledge_cutoff(options.knowledge_cutoff)
    if options.conversation_start_date is not None:
        content.with_conversation_start_date(options.conversation_start_date)
    if effort is None:
        effort = reasoning_effort(options.reasoning_effort, "reasoning_effort")
    if effort is not None:
        content.with_reasoning_effort(effort)
    asked = {*builtins, *options.builtin_tools}
    if BROWSER in asked:
        content.with_browser_tool()
    if PYTHON in asked:
        content.with_python_tool()
    return Message.from_role_and_content(Role.SYSTEM, content)


def developer_message(
    instructions: Sequence[str],
    tools: Sequence[ToolDescription],
    formats: Sequence[ResponseFormat],
    namespaces: Sequence[ToolNamespaceConfig] = (),
) -> Message | None:
    """The developer message, or ``None`` when there is nothing to say.

    ``namespaces``: tool namespaces besides ``functions`` (the Responses API's
    ``namespace`` tools), each rendered as its own harmony namespace.
    """
    texts = [t for t in instructions if t]
    if not texts and not tools and not formats and not namespaces:
        return None
    content = DeveloperContent.new()
    if texts:
        content.with_instructions("\n\n".join(texts))
    if tools:
        content.with_function_tools(tools)
    for namespace in namespaces:
        content.with_tools(namespace)
    for fmt in formats:
        content.with_response_format(fmt.name, fmt.schema, fmt.description)
    return Message.from_role_and_content(Role.DEVELOPER, content)


def assemble_conversation(
    options: PromptOptions,
    effort: ReasoningEffort | None,
    builtins: Sequence[str],
    developer: tuple[Sequence[str], Sequence[ToolDescription], Sequence[ResponseFormat]],
    transcript: Sequence[Message],
    namespaces: Sequence[ToolNamespaceConfig] = (),
) -> Conversation:
    """System message, developer message (if any), then the transcript."""
    head = [system_message(options, effort, builtins)]
    developer_msg = developer_message(*developer, namespaces)
    if developer_msg is not None:
        head.append(developer_msg)
    return Conversation.from_messages([*head, *transcript])


def render_prompt(
    encoding: HarmonyEncoding, conversation: Conversation, cot_policy: CotPolicyName
) -> list[int]:
    """The completion prompt for the assistant's next turn, with ``cot_policy`` applied."""
    config = RenderConversationConfig(cot_policy=cot_policy)
    return encoding.render_conversation_for_completion(conversation, Role.ASSISTANT, config)


def calls_ahead(
    items: Sequence[Any], role: Callable[[Mapping[str, Any]], str | None]
) -> list[bool]:
    """For each history item: does a tool call follow it in its turn (before the next user
    message)? Then an assistant text there is a preamble. ``role`` says which items are
    ``"user"`` messages and which are (or carry) a ``"call"``."""
    flags, ahead = [], False
    for item in reversed(items):
        kind = role(item) if isinstance(item, Mapping) else None
        ahead = kind == "call" or (ahead and kind != "user")
        flags.append(ahead)
    return flags[::-1]


def unique_tools(declared: Sequence[tuple[str, ToolDescription]]) -> list[ToolDescription]:
    """The tools of ``(path, tool)`` pairs, refusing a name declared twice (at its path)."""
    seen: set[str] = set()
    for path, tool in declared:
        if tool.name in seen:
            raise RequestError(f"tool {tool.name!r} is declared twice", f"{path}.name")
        seen.add(tool.name)
    return [tool for _, tool in declared]
