"""Responses API: output tokens -> a ``response`` object with output items.

One harmony message is one output item:

==============================  ==============================================
harmony message                 output item
==============================  ==============================================
``analysis``                    ``reasoning`` with one ``reasoning_text`` part
``commentary``, no recipient    ``message``, ``phase: "commentary"`` (preamble)
``final``                       ``message``, ``phase: "final_answer"``
to ``functions.X``              ``function_call`` named ``X``
to ``N.X`` (``namespace`` N)    ``function_call`` named ``X``, ``namespace: "N"``
to ``browser.*`` / ``python``   ``function_call`` named ``browser.search``,
                                ``python``... (default, lossless), or with
                                ``builtin_calls="native"`` a ``web_search_call``
                                / ``code_interpreter_call``
==============================  ==============================================
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

from .._encoding import HarmonyEncoding
from .._errors import InputError
from .._names import BROWSER, COMMENTARY, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, PYTHON
from .._turn import OutputDiagnostic, OutputItem
from ._common import JsonDict
from ._finish import checked_incomplete_reason, response_status
from ._ids import IdGenerator, as_generator
from ._logprobs import LogprobLike
from ._stream import read_tokens, replay

BuiltinCalls = Literal["function_call", "native"]

#: Request fields a response repeats as given, ``null`` when the request has none
#: (the OpenResponses spec and OpenAI's API list every one of them in every response).
_ECHOED: Final = (
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "safety_identifier",
)
#: Request fields a response reports with the value used when the request has none.
_DEFAULTED: Final = {
    "temperature": DEFAULT_TEMPERATURE,
    "top_p": DEFAULT_TOP_P,
    "top_logprobs": 0,
    "truncation": "disabled",
    "service_tier": "default",
    "store": True,
    "background": False,
}
_PREFIX: Final = {
    "reasoning": "rs",
    "message": "msg",
    "function_call": "fc",
    "web_search_call": "ws",
    "code_interpreter_call": "ci",
}
_BROWSER_ACTIONS: Final = tuple(f"{BROWSER}.{action}" for action in ("search", "open", "find"))


class ResponseBuilder:
    """Ids and JSON for the items and the response (shared by streaming and not)."""

    def __init__(
        self,
        *,
        model: str,
        request: Mapping[str, Any] | None,
        ids: IdGenerator | str | int | None,
        created_at: int | None,
        prompt_tokens: int | None,
        builtin_calls: BuiltinCalls,
    ) -> None:
        if builtin_calls not in get_args(BuiltinCalls):
            raise InputError(
                f"builtin_calls must be 'function_call' or 'native': {builtin_calls!r}"
            )
        self.gen = as_generator(ids)
        self.id = self.gen.new("resp")
        self.model = model
        self.request = request or {}
        self.created_at = int(time.time()) if created_at is None else created_at
        self._fixed_time = created_at is not None
        self.prompt_tokens = prompt_tokens
        self.native = builtin_calls == "native"
        #: The names of the request's ``namespace`` tools (their calls carry ``namespace``).
        self.namespaces = frozenset(
            str(tool.get("name"))
            for tool in self.request.get("tools") or ()
            if isinstance(tool, Mapping) and tool.get("type") == "namespace"
        )
        self._ids: dict[int, tuple[str, str]] = {}

    # -- items ------------------------------------------------------------------------

    def item_type(self, item: OutputItem) -> str:
        if item.kind == "reasoning":
            return "reasoning"
        if item.kind == "text":
            return "message"
        if self.native and item.recipient in _BROWSER_ACTIONS:
            return "web_search_call"
        if self.native and item.recipient == PYTHON:
            return "code_interpreter_call"
        return "function_call"

    def ids(self, item: OutputItem) -> tuple[str, str]:
        """(item id, call id); made on first use, in item order."""
        pair = self._ids.get(item.index)
        if pair is None:
            item_id = self.gen.new(_PREFIX[self.item_type(item)])
            call_id = self.gen.new("call") if self.item_type(item) == "function_call" else ""
            pair = self._ids[item.index] = (item_id, call_id)
        return pair

    def item_json(self, item: OutputItem, *, status: str | None = None) -> JsonDict:
        """The item with its text so far; ``status`` defaults to completed/incomplete."""
        if status is None:
            status = "incomplete" if item.truncated else "completed"
        kind = self.item_type(item)
        item_id, call_id = self.ids(item)
        base: JsonDict = {"type": kind, "id": item_id}
        if kind == "reasoning":
            return {**base, "summary": [], "content": [reasoning_part(item.text)], "status": status}
        if kind == "message":
            return {
                **base,
                "role": "assistant",
                "status": status,
                "content": [text_part(item.text)],
                "phase": COMMENTARY if item.phase == COMMENTARY else "final_answer",
            }
        if kind == "web_search_call":
            # A cut-off search is "failed": older API versions have no "incomplete" here.
            status = "failed" if status == "incomplete" else status
            return {**base, "status": status, "action": web_action(item)}
        if kind == "code_interpreter_call":
            return {
                **base,
                "code": item.text,
                "container_id": "",
                "outputs": None,
                "status": status,
            }
        out = {
            **base,
            "call_id": call_id,
            "name": item.name,
            "arguments": item.text,
            "status": status,
        }
        head, _, rest = (item.recipient or "").partition(".")
        if rest and head in self.namespaces:  # a call into a declared ``namespace`` tool
            out["name"], out["namespace"] = rest, head
        return out

    def skeleton(self, item: OutputItem) -> JsonDict:
        """The item as ``response.output_item.added`` announces it: empty, in progress."""
        out = self.item_json(item, status="in_progress")
        if out["type"] in ("reasoning", "message"):
            out["content"] = []
        elif out["type"] == "function_call":
            out["arguments"] = ""
        elif out["type"] == "code_interpreter_call":
            out["code"] = ""
        return out

    # -- the response ---------------------------------------------------------------------

    def response(
        self,
        output: list[JsonDict],
        *,
        status: str,
        items: Sequence[OutputItem] = (),
        output_tokens: int = 0,
        incomplete_reason: str | None = None,
    ) -> JsonDict:
        """The ``response`` object: every key the OpenResponses spec lists, ``null`` where
        unset (``usage`` too while the response is in progress)."""
        request = self.request
        ended = status not in ("queued", "in_progress")
        out: JsonDict = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            # Now; or ``created_at`` when the caller fixed the time (reproducible output).
            "completed_at": (self.created_at if self._fixed_time else int(time.time()))
            if status == "completed"
            else None,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": incomplete_reason or "max_output_tokens"}
            if status == "incomplete"
            else None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "tool_choice": request.get("tool_choice", "auto"),
            **_echoes(request),
            "usage": usage(self.prompt_tokens, items, output_tokens)
            if self.prompt_tokens is not None and ended
            else None,
        }
        for key in _ECHOED:
            out[key] = request.get(key)
        for key, default in _DEFAULTED.items():
            value = request.get(key)
            out[key] = default if value is None else value
        # The penalties used: none (harmony's engines apply no penalties; a request's
        # are not applied, so they are not reported as used).
        out["presence_penalty"] = out["frequency_penalty"] = 0.0
        if request.get("user") is not None:  # deprecated by OpenAI; kept when sent
            out["user"] = request["user"]
        return out


def response_with_every_key(response: Mapping[str, Any]) -> JsonDict:
    """``response`` with every key the spec lists, as :class:`ResponseBuilder` writes them:
    for response objects kept by an older version (a store's records), which lack some.

    >>> sorted(set(response_with_every_key({"id": "resp_1"})) - {"id"})[:4]
    ['background', 'completed_at', 'error', 'frequency_penalty']
    """
    out: JsonDict = {key: None for key in (*_ECHOED, "completed_at", "error", "usage")}
    out.update(_DEFAULTED, incomplete_details=None, presence_penalty=0.0, frequency_penalty=0.0)
    out.update(tool_choice="auto", parallel_tool_calls=True, output=[])
    out.update(response)
    out.update(_echoes(response))
    return out


def _echoes(source: Mapping[str, Any]) -> JsonDict:
    """The fields a response repeats from its request (``source``) in the spec's shape."""
    return {
        "tools": [echoed_tool(tool) for tool in source.get("tools") or ()],
        "reasoning": _echoed_reasoning(source.get("reasoning")),
        "text": _echoed_text(source.get("text")),
        "metadata": source.get("metadata") or {},
    }


def echoed_tool(tool: Any) -> Any:
    """A declared tool as a response repeats it: a function tool with all four of
    ``name``, ``description``, ``parameters`` and ``strict`` (the last three ``null``
    when not given; ``strict`` as enforced: function tools are strict unless they say
    ``strict: false``); any other tool as given."""
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        return tool
    strict = tool.get("strict")
    return {
        **tool,
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": strict is not False,
    }


def _echoed_reasoning(reasoning: object) -> JsonDict | None:
    if not isinstance(reasoning, Mapping):
        return None
    return {**reasoning, "effort": reasoning.get("effort"), "summary": reasoning.get("summary")}


def _echoed_text(text: object) -> JsonDict:
    """``text`` with its ``format`` (plain text when not given); a ``json_schema`` format
    with all of ``name``, ``description``, ``schema`` and ``strict``."""
    out: JsonDict = dict(text) if isinstance(text, Mapping) else {}
    fmt = out.get("format")
    if not isinstance(fmt, Mapping):
        out["format"] = {"type": "text"}
    elif fmt.get("type") == "json_schema":
        out["format"] = {
            **fmt,
            "description": fmt.get("description"),
            "schema": fmt.get("schema"),
            "strict": fmt.get("strict") is True,
        }
    return out


def reasoning_part(text: str) -> JsonDict:
    return {"type": "reasoning_text", "text": text}


def text_part(text: str) -> JsonDict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def web_action(item: OutputItem) -> JsonDict:
    """The ``action`` of a ``web_search_call`` for a browser call (best effort)."""
    try:
        args = json.loads(item.text)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        args = {}
    if item.recipient == f"{BROWSER}.open":
        link = args.get("id")
        return {"type": "open_page", "url": link if isinstance(link, str) else None}
    if item.recipient == f"{BROWSER}.find":
        return {"type": "find_in_page", "pattern": str(args.get("pattern", "")), "url": ""}
    query = args.get("query")
    return {"type": "search", "query": query if isinstance(query, str) else ""}


def usage(prompt_tokens: int, items: Sequence[OutputItem], output_tokens: int) -> JsonDict:
    reasoning_tokens = sum(i.tokens for i in items if i.kind == "reasoning")
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt_tokens + output_tokens,
    }


def response_from_tokens(
    encoding: HarmonyEncoding,
    tokens: Sequence[int],
    *,
    model: str,
    request: Mapping[str, Any] | None = None,
    finished: bool | None = None,
    incomplete_reason: str | None = None,
    ids: IdGenerator | str | int | None = None,
    created_at: int | None = None,
    prompt_tokens: int | None = None,
    builtin_calls: BuiltinCalls = "function_call",
    diagnostics: list[OutputDiagnostic] | None = None,
    logprobs: Sequence[LogprobLike] | None = None,
) -> JsonDict:
    """A ``response`` object for the tokens the model sampled.

    ``request`` (the Responses request) supplies the fields a response repeats
    (``tools``, ``tool_choice``, ``instructions``...). Without a stop token at
    the end (``<|return|>``, ``<|call|>``, or ``<|end|>``) the output was cut
    off: the response is ``incomplete`` (``max_output_tokens``), the cut item
    too, and ``diagnostics`` get a ``truncated`` one. ``finished`` overrides
    what the tokens say: ``True`` when the engine stopped normally but left the
    stop token out, ``False`` when it hit a token limit. ``incomplete_reason``
    (``content_filter``, ``max_output_tokens``) makes the response incomplete
    for a reason the tokens cannot show. ``ids``: an
    :class:`IdGenerator`, a seed, or ``None`` (random). ``builtin_calls``:
    see the module docstring. ``diagnostics``, if given, receives what the
    model got wrong (never raised). ``logprobs``, parallel to ``tokens``,
    fills each ``output_text`` part's ``logprobs`` as :class:`ResponseStream` does.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> out = enc.encode("<|channel|>commentary to=functions.f <|constrain|>json"
    ...                  "<|message|>{}<|call|>", allowed_special="all")
    >>> r = response_from_tokens(enc, out, model="gpt-oss-20b", ids=1, created_at=0)
    >>> [(i["type"], i["name"], i["arguments"]) for i in r["output"]]
    [('function_call', 'f', '{}')]
    """
    override = checked_incomplete_reason(incomplete_reason)
    settings: dict[str, Any] = {
        "model": model,
        "request": request,
        "ids": ids,
        "created_at": created_at,
        "prompt_tokens": prompt_tokens,
        "builtin_calls": builtin_calls,
    }
    if logprobs is not None:
        from ._responses_stream import ResponseStream

        stream = ResponseStream(encoding, logprobs=True, **settings)
        end = {"finished": finished, "incomplete_reason": incomplete_reason}
        return replay(stream, tokens, logprobs, diagnostics, **end).response
    builder = ResponseBuilder(**settings)
    assembler = read_tokens(encoding, tokens, finished, diagnostics)
    output = [builder.item_json(item) for item in assembler.items]
    status, reason = response_status(assembler.summary, override)
    return builder.response(
        output,
        status=status,
        items=assembler.items,
        output_tokens=assembler.token_count,
        incomplete_reason=reason,
    )
