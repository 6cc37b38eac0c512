"""Chat Completions: a request -> a harmony conversation; output tokens -> a completion.

The mapping is documented in ``docs/openai-compat.md``; in short: system and
developer messages become the developer instructions, ``tools`` the
``functions`` namespace, assistant history becomes ``analysis`` (reasoning),
``commentary`` (a preamble: text followed by tool calls in the same turn) or
``final`` (an answer) messages and calls, and tool messages are paired with
their calls by ``tool_call_id``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._content import ResponseFormat, ToolDescription
from .._encoding import HarmonyEncoding
from .._message import Conversation
from .._names import COMMENTARY, FINAL, CotPolicyName
from .._turn import OutputDiagnostic, OutputItem
from ._common import (
    DEFAULT_COT_POLICY,
    JsonDict,
    PromptOptions,
    arguments_text,
    as_list,
    as_mapping,
    assemble_conversation,
    calls_ahead,
    function_tool,
    join_text,
    opt_str,
    reasoning_effort,
    recipient_for,
    render_prompt,
    req_str,
    response_format,
    unique_tools,
)
from ._errors import (
    ConflictingReasoningError,
    RequestError,
    UnknownRoleError,
    UnsupportedContentError,
)
from ._finish import checked_finish_reason
from ._finish import finish_reason as reason_for
from ._history import Transcript
from ._ids import IdGenerator, as_generator
from ._logprobs import LogprobLike
from ._stream import read_tokens, replay

_TEXT_PARTS: Final = {"text": "text"}
_ASSISTANT_PARTS: Final = {"text": "text", "refusal": "refusal"}
_REASONING_KEYS: Final = ("reasoning_content", "reasoning", "thinking")
#: What joins two reasoning texts, or two texts, of one output into one field.
SEPARATOR: Final = "\n\n"


# -- request -> conversation -----------------------------------------------------------


def chat_request_to_conversation(
    request: Mapping[str, Any], options: PromptOptions | None = None
) -> Conversation:
    """The harmony conversation for a Chat Completions request (a JSON dict).

    Raises :class:`RequestError` (a :class:`harmonia.InputError`) naming the JSON
    path of anything that cannot be converted.

    >>> conv = chat_request_to_conversation({
    ...     "messages": [{"role": "system", "content": "Be brief."},
    ...                  {"role": "user", "content": "Hi"}],
    ...     "reasoning_effort": "low"})
    >>> [(m.author.role.value, type(m.content[0]).__name__) for m in conv.messages]
    [('system', 'SystemContent'), ('developer', 'DeveloperContent'), ('user', 'TextContent')]
    >>> conv.messages[1].content[0].instructions
    'Be brief.'
    """
    request = as_mapping(request, "request")
    options = options or PromptOptions()
    messages = as_list(request.get("messages"), "messages")
    tools = _tools(request)
    declared = frozenset(t.name for t in tools)
    offered = _offered_tools(request.get("tool_choice"), tools)
    formats = _formats(request)
    effort = reasoning_effort(_effort_value(request), "reasoning_effort")
    instructions: list[str] = []
    transcript = Transcript()
    preamble = calls_ahead(messages, _turn_role)
    for i, raw in enumerate(messages):
        path = f"messages[{i}]"
        message = as_mapping(raw, path)
        role = message.get("role")
        if role in ("system", "developer"):
            instructions.append(join_text(message.get("content"), f"{path}.content", _TEXT_PARTS))
        elif role == "user":
            if message.get("content") is None:  # as OpenAI: a user message says something
                raise RequestError(
                    "a user message needs content (a string or a list of text parts)",
                    f"{path}.content",
                )
            transcript.user(join_text(message.get("content"), f"{path}.content", _TEXT_PARTS))
        elif role == "assistant":
            _assistant(transcript, message, path, declared, preamble[i])
        elif role == "tool":
            _tool_result(transcript, message, path)
        elif role == "function":
            raise UnsupportedContentError(
                "legacy function messages are not supported; use tool messages", f"{path}.role"
            )
        else:
            raise UnknownRoleError(f"unknown role {role!r}", f"{path}.role")
    developer = (instructions, offered, formats)
    return assemble_conversation(options, effort, (), developer, transcript.finish())


def render_chat_request(
    encoding: HarmonyEncoding,
    request: Mapping[str, Any],
    options: PromptOptions | None = None,
    *,
    cot_policy: CotPolicyName = DEFAULT_COT_POLICY,
) -> list[int]:
    """The prompt tokens for a request, ending with ``<|start|>assistant``.

    ``cot_policy`` decides which earlier reasoning the model sees; the default,
    ``"guide"``, drops the reasoning of every turn that ended in a final answer
    and keeps the reasoning of the turn in progress (one calling tools).

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> tokens = render_chat_request(enc, {"messages": [{"role": "user", "content": "Hi"}]})
    >>> enc.decode_utf8(tokens[-7:])
    '<|start|>user<|message|>Hi<|end|><|start|>assistant'
    """
    return render_prompt(encoding, chat_request_to_conversation(request, options), cot_policy)


def _effort_value(request: Mapping[str, Any]) -> object:
    if request.get("reasoning_effort") is not None:
        return request["reasoning_effort"]
    reasoning = request.get("reasoning")
    if isinstance(reasoning, Mapping):
        return reasoning.get("effort")
    return None


def _tools(request: Mapping[str, Any]) -> list[ToolDescription]:
    raw = request.get("tools")
    if raw is None:
        return []
    declared = []
    for i, entry in enumerate(as_list(raw, "tools")):
        path = f"tools[{i}]"
        entry = as_mapping(entry, path)
        if entry.get("type", "function") != "function":
            raise UnsupportedContentError(
                f"tool type {entry.get('type')!r} is not supported (only function tools)",
                f"{path}.type",
            )
        fn_path = f"{path}.function"
        declared.append(
            (fn_path, function_tool(as_mapping(entry.get("function"), fn_path), fn_path))
        )
    return unique_tools(declared)


def _offered_tools(choice: object, tools: list[ToolDescription]) -> list[ToolDescription]:
    """The tools to declare: none for ``"none"``, the listed ones for ``allowed_tools``."""
    if choice is None or choice in ("auto", "required"):
        return tools
    if choice == "none":
        return []
    choice = as_mapping(choice, "tool_choice")
    names = {t.name for t in tools}
    if choice.get("type") == "function":
        fn = as_mapping(choice.get("function"), "tool_choice.function")
        name = req_str(fn, "name", "tool_choice.function")
        if name not in names:
            raise RequestError(f"tool_choice names unknown tool {name!r}", "tool_choice.function")
        return tools
    if choice.get("type") == "allowed_tools":
        allowed = as_mapping(choice.get("allowed_tools"), "tool_choice.allowed_tools")
        keep = set()
        for j, entry in enumerate(as_list(allowed.get("tools"), "tool_choice.allowed_tools.tools")):
            path = f"tool_choice.allowed_tools.tools[{j}]"
            fn = as_mapping(as_mapping(entry, path).get("function"), f"{path}.function")
            keep.add(req_str(fn, "name", f"{path}.function"))
        return [t for t in tools if t.name in keep]
    raise RequestError(f"unknown tool_choice {choice.get('type')!r}", "tool_choice.type")


def _formats(request: Mapping[str, Any]) -> list[ResponseFormat]:
    raw = request.get("response_format")
    if raw is None:
        return []
    fmt = response_format(as_mapping(raw, "response_format"), "response_format", nested=True)
    return [] if fmt is None else [fmt]


def _turn_role(message: Mapping[str, Any]) -> str | None:
    if message.get("role") == "user":
        return "user"
    return "call" if message.get("role") == "assistant" and message.get("tool_calls") else None


def _reasoning(message: Mapping[str, Any], path: str) -> str:
    found: tuple[str, str] | None = None
    for key in _REASONING_KEYS:
        value = opt_str(message, key, path)
        if not value:
            continue
        if found is not None and found[1] != value:
            raise ConflictingReasoningError(
                f"differs from {found[0]}: give the reasoning once", f"{path}.{key}"
            )
        found = (key, value)
    return "" if found is None else found[1]


def _assistant(
    transcript: Transcript,
    message: Mapping[str, Any],
    path: str,
    declared: frozenset[str],
    preamble: bool,
) -> None:
    if message.get("function_call") is not None:
        raise UnsupportedContentError(
            "legacy function_call is not supported; use tool_calls", f"{path}.function_call"
        )
    transcript.reasoning(_reasoning(message, path))
    text = join_text(message.get("content"), f"{path}.content", _ASSISTANT_PARTS)
    if not text:
        text = opt_str(message, "refusal", path) or ""
    transcript.assistant_text(text, COMMENTARY if preamble else FINAL)
    calls = message.get("tool_calls")
    for j, raw in enumerate(as_list(calls, f"{path}.tool_calls") if calls is not None else ()):
        call_path = f"{path}.tool_calls[{j}]"
        call = as_mapping(raw, call_path)
        if call.get("type", "function") != "function":
            raise UnsupportedContentError(
                f"tool call type {call.get('type')!r} is not supported", f"{call_path}.type"
            )
        call_id = req_str(call, "id", call_path)
        fn = as_mapping(call.get("function"), f"{call_path}.function")
        name = req_str(fn, "name", f"{call_path}.function")
        arguments = arguments_text(fn.get("arguments"), f"{call_path}.function.arguments")
        transcript.call(call_id, recipient_for(name, declared), arguments, f"{call_path}.id")


def _tool_result(transcript: Transcript, message: Mapping[str, Any], path: str) -> None:
    call_id = opt_str(message, "tool_call_id", path)
    if not call_id:
        raise RequestError(
            "a tool message needs the tool_call_id of its call", f"{path}.tool_call_id"
        )
    output = join_text(message.get("content"), f"{path}.content", _TEXT_PARTS)
    transcript.result(call_id, output, f"{path}.tool_call_id")


# -- output tokens -> a completion ---------------------------------------------------------


def chat_message_from_items(
    items: Sequence[OutputItem], call_ids: Sequence[str], reasoning_field: str
) -> JsonDict:
    """The assistant message of a completion (``content``, reasoning, ``tool_calls``).

    ``call_ids`` gives the id of each call item, in order.
    """
    texts = [i.text for i in items if i.kind == "text" and i.text]
    reasoning = [i.text for i in items if i.kind == "reasoning" and i.text]
    # ``refusal`` is required by OpenAI's schema; gpt-oss writes no refusal channel.
    message: JsonDict = {
        "role": "assistant",
        "content": SEPARATOR.join(texts) if texts else None,
        "refusal": None,
    }
    if reasoning:
        message[reasoning_field] = SEPARATOR.join(reasoning)
    calls = [i for i in items if i.kind == "call"]
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": c.name, "arguments": c.text}}
            for c, i in zip(calls, call_ids, strict=True)
        ]
    return message


def chat_usage(prompt_tokens: int, items: Sequence[OutputItem], completion_tokens: int) -> JsonDict:
    reasoning_tokens = sum(i.tokens for i in items if i.kind == "reasoning")
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


def chat_completion_from_tokens(
    encoding: HarmonyEncoding,
    tokens: Sequence[int],
    *,
    model: str,
    finished: bool | None = None,
    finish_reason: str | None = None,
    ids: IdGenerator | str | int | None = None,
    created: int | None = None,
    prompt_tokens: int | None = None,
    reasoning_field: str = "reasoning_content",
    diagnostics: list[OutputDiagnostic] | None = None,
    logprobs: Sequence[LogprobLike] | None = None,
) -> JsonDict:
    """A ``chat.completion`` object for the tokens the model sampled.

    ``logprobs``, parallel to ``tokens`` (an engine's ``Completion.logprobs``),
    fills ``choices[0].logprobs`` as :class:`ChatCompletionStream` does.

    ``tokens`` follow the prompt's ``<|start|>assistant``. Without a stop token
    at the end (``<|return|>``, ``<|call|>``, or ``<|end|>``) the output was cut
    off: ``finish_reason`` is ``length`` and ``diagnostics`` get a ``truncated``
    one. ``finished`` overrides what the tokens say: ``True`` when the engine
    stopped normally but left the stop token out, ``False`` when it hit a token
    limit. ``finish_reason`` sets the field outright (e.g. ``content_filter``,
    when the engine stopped for a reason the tokens cannot show). ``ids`` is an
    :class:`IdGenerator` or a seed (deterministic ids) or ``None`` (random).
    ``prompt_tokens`` adds ``usage``. ``reasoning_field`` names the reasoning
    key (``reasoning_content`` by default; some clients read ``reasoning``).
    ``diagnostics``, if given, receives what the model got wrong (never raised).

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> out = enc.encode("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant"
    ...                  "<|channel|>final<|message|>4<|return|>", allowed_special="all")
    >>> c = chat_completion_from_tokens(enc, out, model="gpt-oss-120b", ids="seed", created=0)
    >>> c["choices"][0]["message"], c["choices"][0]["finish_reason"]
    ({'role': 'assistant', 'content': '4', 'refusal': None, 'reasoning_content': 'Easy.'}, 'stop')
    """
    override = checked_finish_reason(finish_reason)
    if logprobs is not None:
        from ._chat_stream import ChatCompletionStream

        stream = ChatCompletionStream(
            encoding,
            model=model,
            ids=ids,
            created=created,
            prompt_tokens=prompt_tokens,
            reasoning_field=reasoning_field,
            logprobs=True,
        )
        end = {"finished": finished, "finish_reason": finish_reason}
        return replay(stream, tokens, logprobs, diagnostics, **end).completion
    assembler = read_tokens(encoding, tokens, finished, diagnostics)
    gen = as_generator(ids)
    completion_id = gen.new("chatcmpl", sep="-")
    call_ids = [gen.new("call") for i in assembler.items if i.kind == "call"]
    message = chat_message_from_items(assembler.items, call_ids, reasoning_field)
    finish = reason_for(assembler.summary, override)
    out: JsonDict = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if prompt_tokens is not None:
        out["usage"] = chat_usage(prompt_tokens, assembler.items, assembler.token_count)
    return out
