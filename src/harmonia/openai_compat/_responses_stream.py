"""Responses API streaming: tokens in, response stream events out.

The sequence for one response::

    response.created, response.in_progress
    per item (output_index = its position):
      response.output_item.added
      reasoning:      content_part.added, reasoning_text.delta*, reasoning_text.done,
                      content_part.done
      message:        content_part.added, output_text.delta*, output_text.done,
                      content_part.done
      function_call:  function_call_arguments.delta*, function_call_arguments.done
      web_search_call (native): web_search_call.in_progress, .searching, .completed
      code_interpreter_call (native): code_interpreter_call.in_progress,
                      code_interpreter_call_code.delta*, code_interpreter_call_code.done,
                      code_interpreter_call.interpreting, code_interpreter_call.completed
      response.output_item.done
    response.completed (or response.incomplete when cut off)

``sequence_number`` counts every event from 0; content parts have index 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any

from .._encoding import HarmonyEncoding
from .._errors import InputError
from .._turn import (
    ItemAdded,
    ItemDelta,
    OutputEvent,
    OutputItem,
    TurnSummary,
)
from ._common import JsonDict, compact_json
from ._finish import checked_incomplete_reason, response_status
from ._ids import IdGenerator
from ._responses_output import BuiltinCalls, ResponseBuilder, reasoning_part, text_part
from ._stream import AssembledStream

_DELTA = {
    "reasoning": "response.reasoning_text.delta",
    "message": "response.output_text.delta",
    "function_call": "response.function_call_arguments.delta",
    "code_interpreter_call": "response.code_interpreter_call_code.delta",
}


class ResponseStream(AssembledStream):
    """Turns the tokens a model samples into Responses API stream events (dicts).

    Arguments are those of :func:`response_from_tokens`. :meth:`feed` (or
    :meth:`feed_many`) per token, then :meth:`finish`; the first call also
    returns ``response.created`` and ``response.in_progress``. ``logprobs=True``
    (a request with ``top_logprobs`` or ``include:
    ["message.output_text.logprobs"]``): feed each token with its
    log-probability; a message's tokens' ones go out in its
    ``response.output_text.delta`` / ``.done`` events and its ``output_text``
    part.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> stream = ResponseStream(enc, model="gpt-oss-20b", ids="seed", created_at=0)
    >>> out = enc.encode("<|channel|>final<|message|>Hi<|return|>", allowed_special="all")
    >>> events = stream.feed_many(out) + stream.finish()
    >>> [e["type"] for e in events]  # doctest: +NORMALIZE_WHITESPACE
    ['response.created', 'response.in_progress', 'response.output_item.added',
     'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
     'response.content_part.done', 'response.output_item.done', 'response.completed']
    """

    def __init__(
        self,
        encoding: HarmonyEncoding,
        *,
        model: str,
        request: Mapping[str, Any] | None = None,
        ids: IdGenerator | str | int | None = None,
        created_at: int | None = None,
        prompt_tokens: int | None = None,
        builtin_calls: BuiltinCalls = "function_call",
        logprobs: bool = False,
    ) -> None:
        super().__init__(encoding, logprobs=logprobs)
        self._builder = ResponseBuilder(
            model=model,
            request=request,
            ids=ids,
            created_at=created_at,
            prompt_tokens=prompt_tokens,
            builtin_calls=builtin_calls,
        )
        self._seq = 0
        self._output: list[JsonDict] = []
        self._override: str | None = None
        #: Per item (by index), what each of its text deltas starts with (_delta_head).
        self._heads: dict[int, tuple[str, JsonDict, bool] | None] = {}

    @property
    def request(self) -> Mapping[str, Any]:
        """The request this stream answers (as given; empty when none was)."""
        return self._builder.request

    @property
    def response(self) -> JsonDict:
        """The final ``response`` object (after :meth:`finish`)."""
        if self._result is None:
            raise InputError("the response is known after finish(): call finish() first")
        return self._result

    def start(self) -> list[JsonDict]:
        """``response.created`` and ``response.in_progress`` (sent once)."""
        if self._started:
            return []
        self._started = True
        snapshot = self._builder.response([], status="in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def _opening(self) -> list[JsonDict]:
        return self.start()

    def finish(
        self, *, finished: bool | None = None, incomplete_reason: str | None = None
    ) -> list[JsonDict]:
        """End of generation: the last events, ending with ``response.completed`` or
        ``response.incomplete``.

        ``finished`` and ``incomplete_reason`` are those of
        :func:`response_from_tokens`: by default an output without a stop token
        at the end was cut off (``incomplete``, ``max_output_tokens``).
        """
        self._override = checked_incomplete_reason(incomplete_reason)
        return super().finish(finished=finished)

    def _closing(self, summary: TurnSummary) -> list[JsonDict]:
        status, reason = response_status(summary, self._override)
        self._result = self._builder.response(
            list(self._output),
            status=status,
            items=self._assembler.items,
            output_tokens=self._assembler.token_count,
            incomplete_reason=reason,
        )
        return [self._event(f"response.{status}", response=self._result)]

    # -- internals -------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> JsonDict:
        return {"type": kind, "sequence_number": self._numbered(), **fields}

    def _numbered(self) -> int:
        """The next event's sequence number (every event takes one, in order)."""
        seq = self._seq
        self._seq = seq + 1
        return seq

    def _translate(self, event: OutputEvent) -> list[JsonDict]:
        item = event.item
        if type(event) is ItemDelta:  # one per streamed token: its item's head is kept
            index = item.index
            head = self._heads[index] if index in self._heads else self._delta_head(item)
            if head is None:  # a web search: its arguments are not streamed
                return []
            name, fields, message = head
            # The event made here, not by _event: its keyword arguments cost more than
            # the rest of the delta's translation (one per streamed token).
            delta = {"type": name, "sequence_number": self._numbered(), **fields}
            delta["delta"] = event.text
            if message:
                delta["logprobs"] = (
                    _event_logprobs(self._take_logprobs(item, event.text)) if self._logprobs else []
                )
            return [delta]
        kind = self._builder.item_type(item)
        item_id, _ = self._builder.ids(item)
        at = {"item_id": item_id, "output_index": item.index}
        if isinstance(event, ItemAdded):
            return self._added(item, kind, at)
        return self._done(item, kind, at)

    def _delta_head(self, item: OutputItem) -> tuple[str, JsonDict, bool] | None:
        """An item's delta event name, the fields before its text, whether it is a message
        (its deltas carry log-probabilities); ``None`` for an item whose text is not streamed."""
        kind = self._builder.item_type(item)
        name = _DELTA.get(kind)
        head = None
        if name is not None:
            fields: JsonDict = {"item_id": self._builder.ids(item)[0], "output_index": item.index}
            if kind in ("reasoning", "message"):
                fields["content_index"] = 0
            head = (name, fields, kind == "message")
        self._heads[item.index] = head
        return head

    def _added(self, item: OutputItem, kind: str, at: JsonDict) -> list[JsonDict]:
        index = item.index
        out = [
            self._event(
                "response.output_item.added", output_index=index, item=self._builder.skeleton(item)
            )
        ]
        if kind == "reasoning":
            part = reasoning_part("")
        elif kind == "message":
            part = text_part("")
        elif kind == "web_search_call":
            return [*out, self._event("response.web_search_call.in_progress", **at)]
        elif kind == "code_interpreter_call":
            return [*out, self._event("response.code_interpreter_call.in_progress", **at)]
        else:
            return out
        out.append(self._event("response.content_part.added", **at, content_index=0, part=part))
        return out

    def _done(self, item: OutputItem, kind: str, at: JsonDict) -> list[JsonDict]:
        full = self._builder.item_json(item)
        out: list[JsonDict] = []
        if kind == "message":
            left = self._take_logprobs(item)
            if left:  # tokens that added no text of their own: still reported
                name = "response.output_text.delta"
                shown = _event_logprobs(left)
                out.append(self._event(name, **at, content_index=0, delta="", logprobs=shown))
            full["content"][0]["logprobs"] = self.item_logprobs(item)
        self._output.append(full)
        if kind == "reasoning":
            out.append(
                self._event("response.reasoning_text.done", **at, content_index=0, text=item.text)
            )
            part = full["content"][0]
            out.append(self._event("response.content_part.done", **at, content_index=0, part=part))
        elif kind == "message":
            out.append(
                self._event(
                    "response.output_text.done",
                    **at,
                    content_index=0,
                    text=item.text,
                    logprobs=_event_logprobs(self.item_logprobs(item)),
                )
            )
            part = full["content"][0]
            out.append(self._event("response.content_part.done", **at, content_index=0, part=part))
        elif kind == "function_call":
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    **at,
                    name=item.name,
                    arguments=item.text,
                )
            )
        elif kind == "web_search_call":
            out.append(self._event("response.web_search_call.searching", **at))
            out.append(self._event("response.web_search_call.completed", **at))
        else:
            out.append(
                self._event("response.code_interpreter_call_code.done", **at, code=item.text)
            )
            out.append(self._event("response.code_interpreter_call.interpreting", **at))
            out.append(self._event("response.code_interpreter_call.completed", **at))
        out.append(self._event("response.output_item.done", output_index=item.index, item=full))
        return out


#: The keys of a text delta event as :meth:`ResponseStream._translate` writes them.
_TEXT_DELTA_KEYS = ("type", "sequence_number", "item_id", "output_index", "content_index", "delta")
# By event type: its keys in order, the text before the sequence number, after the delta.
_TEMPLATED = {
    "response.output_text.delta": (
        (*_TEXT_DELTA_KEYS, "logprobs"),
        '{"type":"response.output_text.delta","sequence_number":',
        ',"logprobs":[]}',
    ),
    "response.reasoning_text.delta": (
        _TEXT_DELTA_KEYS,
        '{"type":"response.reasoning_text.delta","sequence_number":',
        "}",
    ),
}


def encode_event(event: JsonDict) -> bytes:
    """``event`` as compact UTF-8 JSON, byte for byte ``compact_json(event).encode()``.

    A text delta without log-probabilities (the event a server encodes once per
    streamed token) is written from its fields around the escaped text, the rest
    by the JSON encoder: the encoder's general walk was about a tenth of the
    server's CPU per token (issue 34). The template is taken only for its type
    with exactly its keys, in its order.
    """
    kind = event.get("type")
    template = _TEMPLATED.get(kind) if type(kind) is str else None
    if template is not None and tuple(event) == template[0]:
        values = tuple(event.values())
        _, seq, item_id, output, content, text = values[:6]
        if (
            type(seq) is int
            and type(item_id) is str
            and type(output) is int
            and type(content) is int
            and type(text) is str
            and (len(values) == 6 or values[6] == [])
        ):
            _, head, tail = template
            # One str built and encoded once: faster than formatting bytes.
            item_id, text = encode_basestring(item_id), encode_basestring(text)
            return (
                f'{head}{seq},"item_id":{item_id},"output_index":{output},'
                f'"content_index":{content},"delta":{text}{tail}'
            ).encode()
    return compact_json(event).encode()


def _event_logprobs(entries: list[JsonDict]) -> list[JsonDict]:
    """``entries`` as the text events carry them: ``{token, logprob, bytes, top_logprobs}``.

    The OpenResponses spec requires ``bytes`` here (as in the ``output_text`` part);
    OpenAI's event schema does not declare it, and its clients ignore it.
    """
    return list(entries)


def ending_events(
    snapshot: Mapping[str, Any],
    after: int,
    *,
    status: str = "failed",
    message: str = "",
    code: str = "server_error",
    reason: str | None = None,
) -> list[JsonDict]:
    """The terminal events of a stream ended from outside the model, numbered after
    event ``after``: ``response.failed`` then ``error`` (``status="failed"``, with
    ``code`` and ``message``), or ``response.incomplete`` (``status="incomplete"``,
    ``incomplete_details.reason`` = ``reason``, ``max_output_tokens`` by default).

    ``snapshot`` is the response as last sent (``response.created``'s will do); the
    one place terminal events are built, for an engine failure mid-stream, a
    background run that failed, or a server that ends in-flight streams.

    >>> [e["type"] for e in ending_events({"id": "resp_1"}, 7, message="boom")]
    ['response.failed', 'error']
    >>> ending_events({"id": "resp_1"}, 7, status="incomplete", reason="shutdown")[0][
    ...     "response"]["incomplete_details"]
    {'reason': 'shutdown'}
    """
    if status == "incomplete":
        response = {
            **snapshot,
            "status": "incomplete",
            "incomplete_details": {"reason": reason or "max_output_tokens"},
        }
        return [{"type": "response.incomplete", "sequence_number": after + 1, "response": response}]
    if status != "failed":
        raise InputError(f"ending_events: status must be 'failed' or 'incomplete', not {status!r}")
    error = {"code": code, "message": message}
    response = {**snapshot, "status": "failed", "error": error}
    return [
        {"type": "response.failed", "sequence_number": after + 1, "response": response},
        {
            "type": "error",
            "sequence_number": after + 2,
            # OpenAI's event (and the openai SDK) has the fields at the top; the
            # OpenResponses spec nests them in ``error``: both are sent.
            "code": code,
            "message": message,
            "param": None,
            "error": {"type": code, "code": code, "message": message, "param": None},
        },
    ]
