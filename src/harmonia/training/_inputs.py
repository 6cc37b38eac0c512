"""Input rows (one JSON object each) to harmony conversations and per-message weights.

Formats: ``openai`` (chat JSONL with ``tools`` and per-message ``weight``; also the
Hugging Face ``messages`` form with ``thinking`` and ``chat_template_kwargs``),
``sharegpt``, ``harmony`` (``Conversation.to_json``), ``responses`` (Responses API
``input`` items), ``columns`` (flat columns named by a mapping) and ``auto``,
which decides from the row's keys. Chat and Responses rows go through
:mod:`harmonia.openai_compat`, so training data and a served prompt are built by
the same rules (system text becomes developer instructions, calls are paired with
results by id, arguments are encoded exactly once).

The system message's date line is written only when asked: ``date=None`` omits it,
``"YYYY-MM-DD"`` writes that date and ``"from-row"`` takes the row's ``date`` key.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard, get_args

from harmonia import Conversation, InputError, Role
from harmonia import vocabulary as v
from harmonia._errors import check_choice
from harmonia._options import option
from harmonia.openai_compat import (
    ConflictingReasoningError,
    PromptOptions,
    RequestError,
    ToolCallMatchError,
    UnknownRoleError,
    chat_request_to_conversation,
    responses_request_to_conversation,
)
from harmonia.vocabulary import ANALYSIS, FINAL

from ._problems import RowError

InputFormat = Literal[
    "auto", "openai", "sharegpt", "harmony", "responses", "columns", "prompt-completion"
]
INPUT_FORMATS: Final[tuple[InputFormat, ...]] = get_args(InputFormat)
Dialect = Literal["harmony", "hf"]
DIALECTS: Final[tuple[Dialect, ...]] = get_args(Dialect)
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# The tokens of the format's structure (not <|startoftext|> and the like), for W202.
_STRUCTURE: Final = (*v.STOP_IDS, v.START_ID, v.MESSAGE_ID, v.CHANNEL_ID, v.CONSTRAIN_ID)
_SPECIAL: Final = re.compile("|".join(re.escape(v.special_text(t)) for t in _STRUCTURE))
_THINK: Final = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
# ShareGPT's "from" -> the chat role (the chat roles' own names are read too).
_SHAREGPT_ROLES: Final = {
    **{role: role for role in ("user", "assistant", "system", "tool")},
    **{"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"},
}
#: The default column mapping: harmony slot -> the row's key.
DEFAULT_COLUMNS: Final = {
    "developer": "developer",
    "user": "user",
    ANALYSIS: ANALYSIS,
    FINAL: FINAL,
}


def parse_columns(text: str) -> dict[str, str]:
    """``--map``'s ``SLOT=COLUMN,...`` as a column mapping."""
    pairs = [item.split("=", 1) for item in text.split(",")]
    if any(len(p) != 2 for p in pairs):
        raise InputError(f"--map needs SLOT=COLUMN pairs, got {text!r}")
    return {slot.strip(): column.strip() for slot, column in pairs}


@dataclass(frozen=True)
class InputOptions:
    """How rows are read: the format, the date line, a default reasoning effort,
    the column mapping of ``format="columns"``, and the dialect: ``harmony``
    (byte-exact with openai-harmony) or ``hf`` (byte-exact with the gpt-oss
    Hugging Face chat template; rows in the ``messages`` form with ``thinking``,
    and a date is required because the template always writes one)."""

    format: InputFormat = option(
        "auto",
        flag="--input-format",
        dest="input_format",
        help="input format; auto detects it from the first rows and says what it chose",
    )
    date: str | None = option(
        None, help="the system date line: YYYY-MM-DD or from-row (default: none)"
    )
    reasoning_effort: str | None = option(
        None,
        choices=("low", "medium", "high"),
        help="the system message's reasoning effort (default: the row's, else medium)",
    )
    columns: Mapping[str, str] | None = option(
        None,
        flag="--map",
        dest="map",
        metavar="SLOT=COLUMN,...",
        help="columns of --input-format columns (slots: developer, user, analysis, final)",
        convert=lambda text: text and parse_columns(text),
    )
    dialect: Dialect = option(
        "harmony",
        help="harmony (openai-harmony's ids) or hf (the gpt-oss chat template's; needs --date)",
    )

    def __post_init__(self) -> None:
        check_choice(self.format, INPUT_FORMATS, "input format")
        check_choice(self.dialect, DIALECTS, "dialect")
        if self.dialect == "hf" and self.date is None:
            raise InputError(
                "the hf dialect writes the date line the template writes: give date "
                "(YYYY-MM-DD or 'from-row'), so that it is never today's by accident"
            )
        if self.date not in (None, "from-row") and not is_date(self.date):
            raise InputError(f"date must be YYYY-MM-DD, 'from-row' or omitted, got {self.date!r}")


@dataclass(frozen=True, slots=True)
class Row:
    """A converted row: the conversation, one weight per message, warnings, format."""

    conversation: Conversation
    weights: list[float | None] | None
    warnings: tuple[tuple[str, str], ...]
    format: str


def detect_format(row: Mapping[str, Any]) -> InputFormat:
    """The format a row looks like (``auto``); raises :class:`RowError` E103 if none."""
    if "conversations" in row:
        return "sharegpt"
    if isinstance(row.get("input"), list):
        return "responses"
    messages = row.get("messages")
    if isinstance(messages, list):
        return "harmony" if any(_is_harmony(m) for m in messages) else "openai"
    if "prompt" in row and "completion" in row:
        return "prompt-completion"
    if any(key in row for key in DEFAULT_COLUMNS.values()):
        return "columns"
    keys = ", ".join(sorted(row)) or "none"
    if ("prompt" in row) != ("completion" in row):  # TRL's prompt-completion, half of it
        missing = "completion" if "prompt" in row else "prompt"
        raise RowError(
            "E103",
            f"a prompt-completion row needs 'prompt' and 'completion'; {missing!r} is "
            f"missing (keys: {keys})",
        )
    raise RowError("E103", f"no 'messages', 'conversations' or 'input' key (keys: {keys})")


def _is_harmony(message: object) -> bool:
    """A harmony message has a channel or recipient, or system/developer content parts."""
    if not isinstance(message, Mapping):
        return False
    if "channel" in message or "recipient" in message:
        return True
    parts = message.get("content")
    return isinstance(parts, list) and any(
        isinstance(p, Mapping) and str(p.get("type", "")).endswith("_content") for p in parts
    )


def convert_row(row: object, options: InputOptions) -> Row:
    """One input row as a harmony conversation; raises :class:`RowError` to reject it."""
    if not isinstance(row, Mapping):
        raise RowError("E150", f"a row must be a JSON object, got {type(row).__name__}")
    fmt = detect_format(row) if options.format == "auto" else options.format
    row = tools_from_json(row)
    try:
        if fmt == "harmony":
            conversation = Conversation.from_json(json.dumps({"messages": row.get("messages")}))
            weights = _harmony_weights(row)
        elif fmt == "responses":
            conversation = responses_request_to_conversation(
                _with_effort(row, options), _prompt_options(row, options)
            )
            weights = None
        else:
            chat = row
            if fmt == "sharegpt":
                chat = _sharegpt_to_chat(row)
            elif fmt == "columns":
                chat = _columns_to_chat(row, options.columns or DEFAULT_COLUMNS)
            elif fmt == "prompt-completion":
                chat = _prompt_completion_to_chat(row)
            messages = chat.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RowError("E102", "'messages' is missing or empty")
            check_contents(messages)
            if fmt == "openai":
                messages = pair_calls_by_order(messages)
                chat = {**chat, "messages": messages}
            conversation = chat_request_to_conversation(
                _with_effort(chat, options), _prompt_options(row, options)
            )
            weights = _chat_weights(messages, conversation)
    except RowError:
        raise
    except ToolCallMatchError as exc:
        raise RowError("E130", str(exc)) from None
    except UnknownRoleError as exc:
        raise RowError("E110", str(exc)) from None
    except ConflictingReasoningError as exc:
        raise RowError("E134", str(exc)) from None
    except RequestError as exc:
        raise RowError("E150", str(exc)) from None
    except InputError as exc:
        raise RowError("E150", str(exc)) from None
    if not conversation.messages:
        raise RowError("E102", "the conversation has no messages")
    return Row(conversation, weights, _warnings(conversation), fmt)


def tools_from_json(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row with a ``tools`` given as JSON text (the form TRL's and other
    Arrow-backed datasets use, as they keep tool schemas intact only as text) parsed."""
    tools = row.get("tools")
    if not isinstance(tools, str):
        return row
    try:
        parsed = json.loads(tools) if tools.strip() else []
    except ValueError:
        raise RowError("E150", "'tools' is a string but not JSON") from None
    if parsed is not None and not isinstance(parsed, list):
        raise RowError("E150", f"'tools' as JSON text must be a list, got {type(parsed).__name__}")
    return {**row, "tools": parsed}


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, quickly for the dicts JSON rows are made of."""
    return type(value) is dict or isinstance(value, Mapping)


_CONTEXT_ROLES: Final = frozenset(("system", "developer", "user", "tool"))
_REASONING_KEYS: Final = ("thinking", "reasoning", "reasoning_content")
# Besides a content, what an assistant message may say (a null content is none).
_ASSISTANT_SAYS: Final = ("refusal", "tool_calls", "function_call", *_REASONING_KEYS)


def check_contents(messages: Sequence[Any]) -> None:
    """Reject a chat message that says nothing: a system, developer, user or tool
    message without ``content`` (absent or null), or an assistant message with no
    content, refusal, reasoning or tool calls. (An assistant message with only
    tool calls is fine, as the OpenAI format allows.)"""
    for i, m in enumerate(messages):
        if not is_mapping(m):
            continue  # the conversion says what is wrong with it
        role = m.get("role")
        silent = m.get("content") is None
        if role in _CONTEXT_ROLES and silent:
            raise RowError("E105", f"messages[{i}] ({role}) has no content")
        if role == "assistant" and silent and not any(m.get(k) for k in _ASSISTANT_SAYS):
            raise RowError("E105", f"messages[{i}] (assistant) has no content, reasoning or calls")


def pair_calls_by_order(messages: list[Any]) -> list[Any]:
    """Calls and results without ids paired by order, as the gpt-oss chat template
    pairs them (its rows carry no ids): a call without an ``id`` gets one, and a tool
    message without a ``tool_call_id`` answers the earliest call still unanswered.
    A call given as ``{"name", "arguments"}`` (without ``function``) is read as one.
    Rows whose calls and results all carry ids are returned unchanged."""
    if not any(_needs_pairing(m) for m in messages):
        return messages
    pending: list[str] = []
    out: list[Any] = []
    made = 0
    for i, m in enumerate(messages):
        if is_mapping(m) and m.get("role") == "assistant":
            calls = m.get("tool_calls")
            if isinstance(calls, list):
                filled = []
                for call in calls:
                    if is_mapping(call):
                        if "function" not in call and "name" in call:
                            function = {"name": call["name"], "arguments": call.get("arguments")}
                            call = {"type": "function", "function": function}
                        if not call.get("id"):
                            made += 1
                            call = {**call, "id": f"harmonia_call_{made}"}
                        if isinstance(call.get("id"), str):
                            pending.append(call["id"])
                    filled.append(call)
                m = {**m, "tool_calls": filled}
        elif is_mapping(m) and m.get("role") == "tool":
            call_id = m.get("tool_call_id")
            if not call_id:
                if not pending:
                    raise RowError(
                        "E130", f"messages[{i}] is a tool result with no unanswered call before it"
                    )
                m = {**m, "tool_call_id": pending.pop(0)}
            elif call_id in pending:
                pending.remove(call_id)
        out.append(m)
    return out


def _needs_pairing(m: object) -> bool:
    if not is_mapping(m):
        return False
    if m.get("role") == "tool":
        return not m.get("tool_call_id")
    calls = m.get("tool_calls") if m.get("role") == "assistant" else None
    return isinstance(calls, list) and any(
        is_mapping(c) and (not c.get("id") or "function" not in c) for c in calls
    )


def is_date(value: object) -> bool:
    """``YYYY-MM-DD`` naming a day of the calendar (not 2025-13-45)."""
    if not isinstance(value, str) or not _DATE.match(value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def row_date(row: Mapping[str, Any], options: InputOptions) -> str | None:
    """The date line of a row: the options' date, or the row's with ``from-row``."""
    if options.date != "from-row":
        return options.date
    value = row.get("date")
    return value if is_date(value) else None


def _prompt_options(row: Mapping[str, Any], options: InputOptions) -> PromptOptions:
    return PromptOptions(
        conversation_start_date=row_date(row, options), reasoning_effort=options.reasoning_effort
    )


def _with_effort(row: Mapping[str, Any], options: InputOptions) -> Mapping[str, Any]:
    """Hugging Face rows carry the effort in ``chat_template_kwargs``."""
    kwargs = row.get("chat_template_kwargs")
    if (
        isinstance(kwargs, Mapping)
        and "reasoning_effort" in kwargs
        and "reasoning_effort" not in row
    ):
        return {**row, "reasoning_effort": kwargs["reasoning_effort"]}
    return row


def _chat_weights(messages: Sequence[Any], conversation: Conversation) -> list[float | None] | None:
    """Spread each chat message's ``weight`` (or ``train``) over the assistant messages
    it became: its reasoning, its text and each of its calls, in that order."""
    if not any(isinstance(m, Mapping) and ("weight" in m or "train" in m) for m in messages):
        return None
    per_message: list[tuple[int, float | None]] = []
    for m in messages:
        if not isinstance(m, Mapping) or m.get("role") != "assistant":
            continue
        weight = m.get("weight", m.get("train"))
        if weight is not None:
            if isinstance(weight, bool):
                weight = 1.0 if weight else 0.0
            if not isinstance(weight, (int, float)):
                raise RowError("E150", f"weight must be a number, got {weight!r}")
        reasoning = any(m.get(k) for k in _REASONING_KEYS)
        text = bool(m.get("content") or m.get("refusal"))
        calls = m.get("tool_calls") or ()
        per_message.append((int(reasoning) + int(text) + len(calls), weight))
    if all(w is None for _, w in per_message):
        return None
    spread = [w for count, w in per_message for _ in range(count)]
    assistant = [i for i, m in enumerate(conversation.messages) if m.author.role is Role.ASSISTANT]
    if len(spread) != len(assistant):
        raise RowError(
            "E150",
            f"cannot place the weights: {len(spread)} assistant messages expected, "
            f"{len(assistant)} converted",
        )
    weights: list[float | None] = [None] * len(conversation.messages)
    for i, w in zip(assistant, spread, strict=True):
        weights[i] = w
    return weights


def _harmony_weights(row: Mapping[str, Any]) -> list[float | None] | None:
    messages = row.get("messages")
    if not isinstance(messages, list) or not any(
        isinstance(m, Mapping) and "weight" in m for m in messages
    ):
        return None
    return [m.get("weight") if isinstance(m, Mapping) else None for m in messages]


def _sharegpt_to_chat(row: Mapping[str, Any]) -> dict[str, Any]:
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise RowError("E102", "'conversations' is missing or empty")
    messages: list[dict[str, Any]] = []
    if isinstance(row.get("system"), str) and row["system"]:
        messages.append({"role": "system", "content": row["system"]})
    calls = 0
    for j, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise RowError("E150", f"conversations[{j}] is not an object")
        who = turn.get("from")
        role = _SHAREGPT_ROLES.get(str(who))
        if role is None:
            raise RowError("E110", f"unknown ShareGPT role {who!r} at conversations[{j}].from")
        value = turn.get("value")
        if value is None:
            raise RowError("E105", f"conversations[{j}] ({who}) has no value")
        text = value if isinstance(value, str) else json.dumps(value)
        if who == "function_call":
            try:
                call = json.loads(text)
                name, arguments = call["name"], call.get("arguments", {})
            except (ValueError, KeyError, TypeError):
                raise RowError(
                    "E150", f"conversations[{j}] is not a JSON {{name, arguments}} call"
                ) from None
            calls += 1
            function = {"name": name, "arguments": arguments}
            tool_call = {"id": f"call_{calls}", "type": "function", "function": function}
            messages.append({"role": "assistant", "content": "", "tool_calls": [tool_call]})
        elif role == "tool":
            messages.append({"role": "tool", "tool_call_id": f"call_{calls}", "content": text})
        elif role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking := _THINK.match(text):
                message.update(content=text[thinking.end() :], thinking=thinking.group(1).strip())
            messages.append(message)
        else:
            messages.append({"role": role, "content": text})
    chat: dict[str, Any] = {"messages": messages}
    # A non-list goes on as it is, so that the chat reader rejects it as for chat rows.
    if isinstance(tools := row.get("tools"), list):
        tools = [
            t if isinstance(t, Mapping) and "function" in t else {"type": "function", "function": t}
            for t in tools
        ]
    if tools is not None:
        chat["tools"] = tools
    return chat


def _columns_to_chat(row: Mapping[str, Any], columns: Mapping[str, str]) -> dict[str, Any]:
    def get(slot: str) -> str:
        value = row.get(columns.get(slot, ""), "")
        return value if isinstance(value, str) else ""

    if not get("user") or not get(FINAL):
        raise RowError(
            "E102",
            f"columns {columns.get('user')!r} and {columns.get(FINAL)!r} are needed "
            "(--map SLOT=COLUMN,... names the row's columns: slots developer, user, "
            f"analysis, {FINAL})",
        )
    messages: list[dict[str, Any]] = []
    if get("developer"):
        messages.append({"role": "developer", "content": get("developer")})
    messages.append({"role": "user", "content": get("user")})
    assistant: dict[str, Any] = {"role": "assistant", "content": get(FINAL)}
    if get(ANALYSIS):
        assistant["thinking"] = get(ANALYSIS)
    messages.append(assistant)
    return {"messages": messages}


def _prompt_completion_to_chat(row: Mapping[str, Any]) -> dict[str, Any]:
    """TRL's prompt-completion rows: ``prompt`` and ``completion`` as texts, or as
    lists of chat messages. As TRL's completion-only loss, only the completion's
    assistant messages train (the prompt's get weight 0)."""
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        prompt = [{"role": "user", "content": prompt}]
        completion = [{"role": "assistant", "content": completion}]
    if not (isinstance(prompt, list) and isinstance(completion, list) and completion):
        raise RowError(
            "E102",
            "'prompt' and 'completion' must both be texts, or both lists of chat messages "
            "(the completion not empty)",
        )
    context = [
        {**m, "weight": 0} if isinstance(m, Mapping) and m.get("role") == "assistant" else m
        for m in prompt
    ]
    trained = [
        {"weight": 1, **m} if isinstance(m, Mapping) and m.get("role") == "assistant" else m
        for m in completion
    ]
    chat = {k: v for k, v in row.items() if k not in ("prompt", "completion")}
    return {**chat, "messages": [*context, *trained]}


def _warnings(conversation: Conversation) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    for i, m in enumerate(conversation.messages):
        if m.author.role in (Role.SYSTEM, Role.DEVELOPER):
            continue
        for part in m.content:
            text = getattr(part, "text", None)
            # The substring test first: almost no text has any, and it is much cheaper.
            if isinstance(text, str) and "<|" in text and _SPECIAL.search(text):
                found.append(("W202", f"message {i} contains special-token text (kept as text)"))
                break
    return tuple(found)
