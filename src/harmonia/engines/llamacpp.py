"""llama.cpp's ``llama-server`` over HTTP: ``POST /completion`` with a token-id prompt.

The request sends the prompt as an id array with ``"stream": true`` and
``"return_tokens": true``; every SSE chunk carries the new ids in ``tokens``
and the last one ``"stop": true`` with a ``stop_type`` (``eos``, ``limit``,
``word``). llama-server has no per-request stop-id list: it stops at the
model's end-of-generation ids (the gpt-oss GGUF marks ``<|return|>`` and
``<|call|>``), and this engine also ends the generation itself at the first
id of ``stop_token_ids`` (closing the stream, which the server notices).
Cancelling closes the stream.

llama.cpp's default samplers differ from harmonia's parameters (top-k 40,
min-p 0.05, a repeat penalty), so the request switches them off: only the
temperature and top-p of :class:`SamplingParams` apply, as with the other
engines.

A :class:`~harmonia.engines.Constraint` is sent as GBNF (``grammar``) with
special tokens by id (``<[200005]>``; llama.cpp PR #17816), written by
:func:`lark_to_gbnf`: without the stop ids (llama-server masks its
end-of-generation ids until the grammar is complete, so the grammar ends where
the answer or the call ends and the server's own end id closes the turn), with
free text that cannot spell a special token, and with every JSON schema compiled
to GBNF (``json_args="schema"``, the default). The end id the server stopped on
is checked against the turn: a final answer ends with ``<|return|>``, a tool
call with ``<|call|>``; another end-of-generation id (``<|endoftext|>``, or the
wrong one of the two) is replaced by the right one, which the format fixes, and
:attr:`LlamaCppEngine.repaired_ends` counts it.

llama-server sends no chunk for a token that leaves an incomplete UTF-8
character, so ids can be missing from the stream. Every chunk says how many ids
were sampled (``tokens_predicted``): a gap is filled from the raw bytes of the
next chunk's text (``n_probs`` makes each chunk carry them; ``content`` writes
bytes that are not UTF-8 as U+FFFD, so it is used only where it holds none), when
they split into exactly that many ids in exactly one way; otherwise the generation
fails with an :class:`~harmonia.EngineError` naming the position (see
:mod:`._gaps`). The request asks for a few tokens beyond ``max_tokens`` so that a
character cut at the limit completes and its ids arrive; the engine itself stops at
``max_tokens``. :attr:`LlamaCppEngine.recovered_ids` counts the recovered ids.

Log-probabilities (``SamplingParams.top_logprobs``) are read from the same
``n_probs`` entries (at least 1: the sampled id's own logprob comes with it;
``post_sampling_probs: false``), so they are the model's distribution before
the samplers, as :class:`~harmonia.engines.TokenLogprob` says. Each chunk
carries the entry of its own id in ``completion_probabilities``. An id the
stream left out (recovered from the text, above) comes with no entry, and an
end id this engine put in itself has one only when the server listed it among
the alternatives; then the generation fails with an
:class:`~harmonia.EngineError` rather than give ids and log-probabilities
that no longer line up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from harmonia import EngineError, InputError

from .._tokenizer import get_tokenizer
from .._tokenizer import special_tokens as st
from ._base import Constraint, Finish, FinishReason, SamplingParams, TokenLogprob
from ._gaps import Unrecoverable, preserved_token_texts, recover
from ._gbnf import END_OF_GENERATION, JsonPolicy, expected_end, lark_to_gbnf
from ._generation import Emit, Producer
from ._http import HttpEngine, HttpOptions, int_list
from ._logprobs import MalformedLogprobs, from_entry

__all__ = ["COMPLETION_PATH", "LlamaCppEngine", "completion_body", "lark_to_gbnf"]

COMPLETION_PATH: Final = "/completion"
#: Tokens asked for beyond max_tokens: enough to complete a UTF-8 character (4 bytes).
_OVERSHOOT: Final = 3


def completion_body(
    prompt: Sequence[int], params: SamplingParams, grammar: str | None
) -> dict[str, Any]:
    """The ``/completion`` request for ``prompt`` (``grammar`` is GBNF)."""
    body: dict[str, Any] = {
        "prompt": list(prompt),
        "n_predict": params.max_tokens + _OVERSHOOT,
        "temperature": params.temperature,
        "top_p": params.top_p,
        # Neutralise llama.cpp's other default samplers: SamplingParams is the contract.
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
        # Each chunk's completion_probabilities entry carries the raw bytes of its text
        # (content writes bytes that are not UTF-8 as U+FFFD), which is what recovers the
        # ids the stream leaves out exactly (see _gaps). n_probs 0 sends no entry at all.
        "n_probs": max(1, params.top_logprobs or 0),
        "post_sampling_probs": False,
        # harmony's named special tokens write their text, so a left-out id is never one
        # of no bytes, and an end id's chunk carries the bytes held back before it.
        "preserved_tokens": preserved_token_texts(),
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if grammar is not None:
        body["grammar"] = grammar
    return body


def _is_last(payload: dict[str, Any]) -> bool:
    """Whether a stream event is llama-server's last (``"stop": true``)."""
    return payload.get("stop") is True


class LlamaCppEngine(HttpEngine):
    """A ``llama-server`` reached over HTTP (``base_url`` such as ``http://127.0.0.1:8080``).

    ``api_key`` (or the ``LLAMA_API_KEY`` environment variable, ``api_key_env``)
    is sent as a bearer token; ``options`` sets timeouts; ``json_args`` says
    what to do with JSON schemas in a constraint: ``"schema"`` (the default)
    compiles them to GBNF, ``"any"`` enforces JSON syntax only, ``"refuse"``
    refuses such constraints.

    .. code-block:: python

        engine = LlamaCppEngine("http://127.0.0.1:8080")
        async for ids in engine.generate(prompt_ids, SamplingParams(max_tokens=512)):
            ...
    """

    name = "llama.cpp"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = "LLAMA_API_KEY",
        options: HttpOptions | None = None,
        json_args: JsonPolicy = "schema",
    ) -> None:
        if json_args not in ("schema", "any", "refuse"):
            raise InputError(f"json_args must be 'schema', 'any' or 'refuse', not {json_args!r}")
        super().__init__(base_url, api_key, api_key_env, options)
        self.json_args: JsonPolicy = json_args
        #: Turns whose end id the server got wrong and this engine replaced.
        self.repaired_ends = 0
        #: Ids the stream left out and this engine recovered from the chunks' text.
        self.recovered_ids = 0

    def __repr__(self) -> str:
        return f"LlamaCppEngine({self.base_url!r}, json_args={self.json_args!r})"

    def grammar_for(self, constraint: Constraint) -> str:
        """The GBNF this engine sends for ``constraint`` (or UnsupportedConstraintError)."""
        lark = constraint.require_grammar(self.name, self.base_url)
        return lark_to_gbnf(lark, json_args=self.json_args)

    def _producer(
        self, ids: tuple[int, ...], params: SamplingParams, constraint: Constraint | None
    ) -> Producer:
        """A streamed completion on the server (the GBNF built now: a refusal raises here)."""
        grammar = self.grammar_for(constraint) if constraint is not None else None
        body = completion_body(ids, params, grammar)

        async def produce(emit: Emit) -> Finish:
            stream = _Stream(self, emit, grammar is not None, params.top_logprobs)
            return await stream.run(body)

        return produce

    async def max_sequences(self) -> int | None:
        """How many sequences the server runs at once: its slots (``/props`` ``total_slots``,
        ``llama-server --parallel``); ``None`` when it does not say."""
        props = await self._http.get_json("/props")
        slots = props.get("total_slots") if isinstance(props, dict) else None
        return slots if isinstance(slots, int) and not isinstance(slots, bool) else None


class _Stream:
    """One streamed completion: ids checked against ``tokens_predicted``, the end checked."""

    def __init__(
        self, engine: LlamaCppEngine, emit: Emit, constrained: bool, top_logprobs: int | None
    ) -> None:
        self.engine = engine
        self.http = engine._http
        self.url = engine.base_url + COMPLETION_PATH
        self.emit = emit
        self.constrained = constrained
        self.tokens: list[int] = []
        #: ``SamplingParams.top_logprobs`` (``None``: none asked for).
        self.top_logprobs = top_logprobs
        #: The server's entries of the chunk being read, by id.
        self.entries: dict[int, TokenLogprob] = {}

    def error(self, message: str) -> EngineError:
        return self.http.error(message, self.url)

    async def run(self, body: dict[str, Any]) -> Finish:
        finish = await self.http.stream_batches(COMPLETION_PATH, body, self.read, last=_is_last)
        if finish is None:
            raise self.error("the stream ended before a chunk with stop: true")
        return finish

    def read(self, batch: list[dict[str, Any]]) -> Finish | None:
        """One read's payloads: their ids sent on; the :class:`Finish` at ``stop: true``."""
        for payload in batch:
            ids = int_list(payload.get("tokens"), "tokens", self.http, self.url)
            if self.top_logprobs is not None:
                self.entries = self.read_entries(payload)
            predicted = payload.get("tokens_predicted")
            if isinstance(predicted, int) and not isinstance(predicted, bool):
                ids = self.fill_gap(ids, predicted, payload)
            if ids:
                self.send(ids)
            if payload.get("stop") is True:
                return self.finish(payload.get("stop_type"))
        return None

    def fill_gap(self, ids: list[int], predicted: int, payload: dict[str, Any]) -> list[int]:
        """``ids`` with the ids the server sampled but did not send put back in front."""
        missing = predicted - len(self.tokens) - len(ids)
        if missing <= 0:
            return ids
        if payload.get("stop") is True and not ids:
            if missing == 1 and self.constrained and payload.get("stop_type") == "eos":
                return []  # the end id itself: finish() puts the right one
            raise self.error(
                f"the server sampled {predicted} ids but sent {len(self.tokens)}: the last "
                f"{missing} (from position {len(self.tokens)}) were never sent, nor their "
                "bytes (an incomplete UTF-8 character at the end)"
            )
        try:
            recovered = recover(missing, ids, payload)
        except Unrecoverable as exc:
            raise self.error(
                f"the stream left out {missing} sampled ids at position {len(self.tokens)} "
                f"(no chunk for an incomplete UTF-8 character), and they cannot be recovered "
                f"exactly: {exc}"
            ) from None
        if self.top_logprobs is not None:
            # llama-server sends each chunk's entry for its own id only: the
            # left-out ids' log-probabilities are gone.
            raise self.error(
                f"the stream left out {missing} sampled ids (no chunk for an incomplete "
                "UTF-8 character) and their log-probabilities with them; the ids are "
                "recoverable but their logprobs are not: ask without top_logprobs"
            )
        self.engine.recovered_ids += missing
        return recovered + ids

    def read_entries(self, payload: dict[str, Any]) -> dict[int, TokenLogprob]:
        """The chunk's ``completion_probabilities`` by id (the top ones cut to what was asked)."""
        assert self.top_logprobs is not None
        raw = payload.get("completion_probabilities") or []
        if not isinstance(raw, list):
            raise self.error(f"malformed stream data: completion_probabilities is {raw!r}")
        try:
            entries = [from_entry(entry, self.top_logprobs) for entry in raw]
        except MalformedLogprobs as exc:
            raise self.error(f"malformed stream data: {exc}") from None
        return {entry.token: entry for entry in entries}

    def logprobs_for(self, ids: list[int]) -> list[TokenLogprob] | None:
        """Each id's entry (an end id put in here: from the alternatives), or an error."""
        if self.top_logprobs is None:
            return None
        out: list[TokenLogprob] = []
        for token in ids:
            entry = self.entries.get(token)
            if entry is None:
                # An end id this engine put in: the server may have listed it.
                for sent in self.entries.values():
                    listed = dict(sent.top).get(token)
                    if listed is not None:
                        entry = TokenLogprob(token, listed, sent.top)
                        break
            if entry is None:
                raise self.error(
                    f"the server sent no log-probability for id {token} (an end id this "
                    "engine supplied, or a chunk without completion_probabilities); ids and "
                    "logprobs would no longer line up"
                )
            out.append(entry)
        return out

    def send(self, ids: list[int]) -> None:
        if self.constrained and ids[-1] in END_OF_GENERATION:
            # Under a grammar the server ends on an end-of-generation id once the turn
            # is complete; the format says which one it must be.
            *head, end = ids
            right = expected_end([*self.tokens, *head], get_tokenizer().token_bytes_table)
            if end != right:
                self.engine.repaired_ends += 1
            ids = [*head, right]
        logprobs = self.logprobs_for(ids)
        self.tokens.extend(ids)
        self.emit(ids, logprobs)

    def finish(self, stop_type: Any) -> Finish:
        last = self.tokens[-1] if self.tokens else None
        if stop_type == "limit":
            return Finish(FinishReason.LENGTH)
        if stop_type == "eos":
            if self.constrained and last not in (st.RETURN, st.CALL):
                # The end id was not streamed: send() puts the one the format says.
                self.entries = {}  # the last chunk's entries belong to its own ids
                self.send([st.ENDOFTEXT])
                last = self.tokens[-1]
            # An end-of-generation id of the model (under a grammar, the right one).
            return Finish(FinishReason.STOP, stop_token=last)
        if stop_type == "word":  # never asked for, but a server may be set up so
            return Finish(FinishReason.STOP, message="a stop word")
        raise self.error(f"the completion ended with stop_type {stop_type!r}")
