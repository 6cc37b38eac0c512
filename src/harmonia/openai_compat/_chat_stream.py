"""Chat Completions streaming: tokens in, ``chat.completion.chunk`` dicts out.

Each harmony message is announced when its header is complete, so a tool call's
id and name go out before its arguments, and text deltas go straight to the
right field: ``content`` (final answers and preambles),
``reasoning_content`` (analysis) or ``tool_calls[].function.arguments``. No
special token or header text can reach a delta. The deltas join to exactly the
message :func:`chat_completion_from_tokens` returns for the same tokens.
"""

from __future__ import annotations

import time
from json.encoder import encode_basestring  # the JSON encoder's own string escaper (C)

from .._encoding import HarmonyEncoding
from .._errors import InputError
from .._turn import (
    ItemAdded,
    ItemDelta,
    OutputEvent,
    OutputItem,
    TurnSummary,
)
from ._chat import SEPARATOR, chat_message_from_items, chat_usage
from ._common import JsonDict, compact_json
from ._finish import checked_finish_reason, finish_reason
from ._ids import IdGenerator, as_generator
from ._stream import AssembledStream

#: What follows a text delta's text in its chunk.
_DELTA_TAIL = b'},"finish_reason":null,"logprobs":null}]}'


class ChatCompletionStream(AssembledStream):
    """Turns the tokens a model samples into ``chat.completion.chunk`` objects.

    Call :meth:`feed` for each token (or :meth:`feed_many`), then :meth:`finish`
    once; each returns the chunks to send. Arguments are those of
    :func:`chat_completion_from_tokens`; ``include_usage`` (the request's
    ``stream_options.include_usage``) adds a last chunk with ``usage``.
    ``logprobs=True`` (the request's ``logprobs``): feed each token with its
    log-probability; the ``content`` tokens' ones go out with their text in
    ``choices[0].logprobs.content`` (OpenAI's shape), and all of them in the
    completion.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> stream = ChatCompletionStream(enc, model="gpt-oss-20b", ids="seed", created=0)
    >>> out = enc.encode("<|channel|>final<|message|>Hello!<|return|>", allowed_special="all")
    >>> chunks = stream.feed_many(out) + stream.finish()
    >>> [c["choices"][0]["delta"] for c in chunks]
    [{'role': 'assistant', 'content': ''}, {'content': 'Hello'}, {'content': '!'}, {}]
    >>> chunks[-1]["choices"][0]["finish_reason"]
    'stop'
    """

    def __init__(
        self,
        encoding: HarmonyEncoding,
        *,
        model: str,
        ids: IdGenerator | str | int | None = None,
        created: int | None = None,
        include_usage: bool = False,
        prompt_tokens: int | None = None,
        reasoning_field: str = "reasoning_content",
        logprobs: bool = False,
    ) -> None:
        super().__init__(encoding, logprobs=logprobs)
        self._ids = as_generator(ids)
        self._id = self._ids.new("chatcmpl", sep="-")
        self._created = int(time.time()) if created is None else created
        self._model = model
        self._include_usage = include_usage
        self._prompt_tokens = prompt_tokens
        self._reasoning_field = reasoning_field
        self._call_ids: list[str] = []
        self._written: set[str] = set()  # fields that already hold text
        self._fresh: set[int] = set()  # items that have not written yet
        self._override: str | None = None
        self._reason = "stop"
        self._heads: dict[str, bytes] | None = None  # encode_chunk's templates, by field

    def finish(
        self, *, finished: bool | None = None, finish_reason: str | None = None
    ) -> list[JsonDict]:
        """End of generation: the last chunks (the one with ``finish_reason``, then usage).

        ``finished`` and ``finish_reason`` are those of
        :func:`chat_completion_from_tokens`: by default an output without a stop
        token at the end was cut off (``length``).
        """
        self._override = checked_finish_reason(finish_reason)
        return super().finish(finished=finished)

    def _closing(self, summary: TurnSummary) -> list[JsonDict]:
        self._reason = finish_reason(summary, self._override)
        items = self._assembler.items
        chunks = [self._chunk({}, self._reason)]
        usage = chat_usage(self._prompt_tokens or 0, items, self._assembler.token_count)
        if self._include_usage:
            chunk = self._chunk({}, None)
            chunk["choices"] = []
            chunk["usage"] = usage
            chunks.append(chunk)
        self._result = self._completion(usage)
        return chunks

    @property
    def completion(self) -> JsonDict:
        """The ``chat.completion`` the chunks add up to (after :meth:`finish`)."""
        if self._result is None:
            raise InputError("the completion is known after finish(): call finish() first")
        return self._result

    def encode_chunk(self, chunk: JsonDict) -> bytes:
        """``chunk`` as compact UTF-8 JSON, byte for byte
        ``json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode()``.

        A text delta as this stream made it (most of its chunks) is written
        from a template of its fixed fields around the escaped text, the rest by
        the JSON encoder: a server encodes one chunk per streamed token.
        """
        # Subscripts in a try, not get(): a missing key is a chunk of another shape.
        try:
            choices = chunk["choices"]
            if (
                len(chunk) == 5
                and chunk["id"] is self._id
                and chunk["model"] is self._model
                and chunk["created"] is self._created
                and type(choices) is list
                and len(choices) == 1
            ):
                choice = choices[0]
                if (
                    type(choice) is dict
                    and len(choice) == 4
                    and choice["finish_reason"] is None
                    and choice["logprobs"] is None
                ):
                    delta = choice["delta"]
                    if type(delta) is dict and len(delta) == 1:
                        ((field, text),) = delta.items()
                        head = (self._heads or self._templates()).get(field)
                        if head is not None and type(text) is str:
                            return head + encode_basestring(text).encode() + _DELTA_TAIL
        except (KeyError, TypeError, IndexError):
            pass
        return compact_json(chunk).encode()

    def _templates(self) -> dict[str, bytes]:
        """The bytes of a text delta chunk up to its text, by the delta's field."""
        if self._heads is None:
            self._heads = {}
            # The keys in the order _chunk writes them (the template is only for those).
            if type(self._created) is int and type(self._model) is str:
                for field in ("content", self._reasoning_field):
                    probe = self._chunk({field: ""}, None)
                    whole = compact_json(probe).encode()
                    cut = whole.rindex(b'""' + _DELTA_TAIL)
                    self._heads[field] = whole[:cut]
        return self._heads

    # -- internals -------------------------------------------------------------------------

    def _completion(self, usage: JsonDict) -> JsonDict:
        items = self._assembler.items
        message = chat_message_from_items(items, self._call_ids, self._reasoning_field)
        out: JsonDict = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self._reason,
                    "logprobs": self._all_logprobs(items),
                }
            ],
        }
        if self._prompt_tokens is not None or self._include_usage:
            out["usage"] = usage
        return out

    def _opening(self) -> list[JsonDict]:
        if self._started:
            return []
        self._started = True
        return [self._chunk({"role": "assistant", "content": ""}, None)]

    def _all_logprobs(self, items: list[OutputItem]) -> JsonDict | None:
        if not self._logprobs:
            return None
        content = [entry for item in items for entry in self.item_logprobs(item)]
        return {"content": content, "refusal": None}

    def _chunk(
        self, delta: JsonDict, reason: str | None, logprobs: list[JsonDict] | None = None
    ) -> JsonDict:
        shown = None if logprobs is None else {"content": logprobs, "refusal": None}
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": shown}],
        }

    def _logprobs_of(self, item: OutputItem, text: str = "") -> list[JsonDict] | None:
        """The item's unsent log-probabilities, for the chunk carrying its ``text``."""
        if not self._logprobs or item.kind != "text":
            return None
        return self._take_logprobs(item, text)

    def _translate(self, event: OutputEvent) -> list[JsonDict]:
        item = event.item
        if type(event) is ItemDelta:  # one per streamed token: tested first
            shown = self._logprobs_of(item, event.text) if self._logprobs else None
            return [self._chunk(self._delta(item, event.text), None, shown)]
        if isinstance(event, ItemAdded):
            self._fresh.add(item.index)
            if item.kind != "call":
                return []
            self._call_ids.append(self._ids.new("call"))
            call = {
                "index": len(self._call_ids) - 1,
                "id": self._call_ids[-1],
                "type": "function",
                "function": {"name": item.name, "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]}, None)]
        left = self._logprobs_of(item)
        if left:  # tokens that added no text of their own (yet): still reported
            return [self._chunk({"content": ""}, None, left)]
        return []

    def _delta(self, item: OutputItem, text: str) -> JsonDict:
        if item.kind == "call":
            call = {"index": len(self._call_ids) - 1, "function": {"arguments": text}}
            return {"tool_calls": [call]}
        field = "content" if item.kind == "text" else self._reasoning_field
        if item.index in self._fresh:
            self._fresh.discard(item.index)
            if field in self._written:
                text = SEPARATOR + text
            self._written.add(field)
        return {field: text}
