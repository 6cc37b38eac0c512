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
special tokens by id (``<[200005]>``; llama.cpp PR #17816). Its free text,
headers, tool names and stop tokens translate exactly; JSON schemas do not
(see :func:`lark_to_gbnf`): by default such a constraint is refused, with
``json_args="any"`` the arguments are held to JSON syntax only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from harmonia import InputError

from .._runtime import api_key as resolve_api_key
from ._base import Constraint, Finish, FinishReason, SamplingParams, check_prompt
from ._gbnf import JsonPolicy, lark_to_gbnf
from ._generation import Emit, Generation
from ._http import HttpClient, HttpOptions, int_list, normalise_base_url

__all__ = ["COMPLETION_PATH", "LlamaCppEngine", "completion_body", "lark_to_gbnf"]

_NAME: Final = "llama.cpp"
COMPLETION_PATH: Final = "/completion"


def completion_body(
    prompt: Sequence[int], params: SamplingParams, grammar: str | None
) -> dict[str, Any]:
    """The ``/completion`` request for ``prompt`` (``grammar`` is GBNF)."""
    body: dict[str, Any] = {
        "prompt": list(prompt),
        "n_predict": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        # Neutralise llama.cpp's other default samplers: SamplingParams is the contract.
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if grammar is not None:
        body["grammar"] = grammar
    return body


class LlamaCppEngine:
    """A ``llama-server`` reached over HTTP (``base_url`` such as ``http://127.0.0.1:8080``).

    ``api_key`` (or the ``LLAMA_API_KEY`` environment variable, ``api_key_env``)
    is sent as a bearer token; ``options`` sets timeouts; ``json_args`` says
    what to do with JSON schemas in a constraint (``"refuse"``, the default,
    or ``"any"``: enforce JSON syntax only).

    .. code-block:: python

        engine = LlamaCppEngine("http://127.0.0.1:8080")
        async for ids in engine.generate(prompt_ids, SamplingParams(max_tokens=512)):
            ...
    """

    name = _NAME

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = "LLAMA_API_KEY",
        options: HttpOptions | None = None,
        json_args: JsonPolicy = "refuse",
    ) -> None:
        if json_args not in ("refuse", "any"):
            raise InputError(f"json_args must be 'refuse' or 'any', not {json_args!r}")
        self.base_url = normalise_base_url(base_url, _NAME)
        self.json_args: JsonPolicy = json_args
        self._http = HttpClient(
            engine=_NAME,
            base_url=self.base_url,
            api_key=resolve_api_key(api_key, api_key_env),
            options=options or HttpOptions(),
        )

    def __repr__(self) -> str:
        return f"LlamaCppEngine({self.base_url!r}, json_args={self.json_args!r})"

    def grammar_for(self, constraint: Constraint) -> str:
        """The GBNF this engine sends for ``constraint`` (or UnsupportedConstraintError)."""
        lark = constraint.require_grammar(self.name, self.base_url)
        return lark_to_gbnf(lark, json_args=self.json_args)

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> Generation:
        """Start a streamed completion on the server."""
        ids = check_prompt(prompt, self.name)
        params = params or SamplingParams()
        grammar = self.grammar_for(constraint) if constraint is not None else None
        body = completion_body(ids, params, grammar)

        async def produce(emit: Emit) -> Finish:
            return await self._stream(body, emit)

        return Generation(produce, engine=self.name, prompt_tokens=len(ids), params=params)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _stream(self, body: dict[str, Any], emit: Emit) -> Finish:
        url = self.base_url + COMPLETION_PATH
        last: int | None = None
        async for payload in self._http.stream_events(COMPLETION_PATH, body):
            ids = int_list(payload.get("tokens"), "tokens", self._http, url)
            if ids:
                last = ids[-1]
                emit(ids)
            if payload.get("stop") is True:
                stop_type = payload.get("stop_type")
                if stop_type == "limit":
                    return Finish(FinishReason.LENGTH)
                if stop_type == "eos":
                    # An end-of-generation id of the model that is not one of ours.
                    return Finish(FinishReason.STOP, stop_token=last)
                if stop_type == "word":  # never asked for, but a server may be set up so
                    return Finish(FinishReason.STOP, message="a stop word")
                raise self._http.error(f"the completion ended with stop_type {stop_type!r}", url)
        raise self._http.error("the stream ended before a chunk with stop: true", url)
