"""vLLM over HTTP: token ids in, token ids out, streamed.

Two endpoints speak ids both ways:

* ``POST /inference/v1/generate`` (vLLM's tokens-in/tokens-out endpoint):
  ``{"token_ids": [...], "sampling_params": {...}, "stream": true}``, chunks
  carry ``choices[].token_ids``;
* ``POST /v1/completions`` with the prompt as a list of ids and
  ``"return_token_ids": true``: chunks carry ``choices[].token_ids``.

``api="auto"`` (the default) tries the first and falls back to the second for
good when the server answers 404. Both requests stop on ``stop_token_ids``
(harmony's ``<|return|>`` 200002 and ``<|call|>`` 200012 by default) and set
``skip_special_tokens: false``. Cancelling closes the stream, which vLLM
turns into an abort of the request. A :class:`~harmonia.engines.Constraint`
is sent as ``structured_outputs: {"grammar": <Lark text>}``, which vLLM
enforces when it runs the llguidance backend
(``--structured-outputs-config.backend guidance``). The grammar is cut to the
settings of the llguidance the server ships (``llguidance="1.7"`` by default:
vLLM 0.32 and 0.33 pin ``llguidance>=1.7,<1.8``), since llguidance refuses a
whole grammar that names a setting it does not know.

Log-probabilities (``SamplingParams.top_logprobs``) are asked for with
vLLM's ``logprobs`` sampling field, one more than the alternatives wanted
(vLLM lists the sampled id among them; at most 20, vLLM's default
``--max-logprobs``), and read by id: ``logprobs.content[].token_id`` from the
generate endpoint, ``logprobs`` with ``return_tokens_as_token_ids`` from
``/v1/completions``. They are what the server computes (by default
``raw_logprobs``: the model's distribution before temperature and top-p). A
stop id the server left out of ``token_ids`` has none; with log-probabilities
asked for, that fails the generation instead of misaligning them.

The tokens-in/tokens-out endpoint exists only when the server was started with
``vllm serve --enable-scale-out`` (or ``--tokens-only``); without it the server
answers 404 and ``api="auto"`` falls back to ``/v1/completions``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, Literal

from harmonia import InputError

from ._base import MAX_TOP_LOGPROBS, Constraint, Finish, FinishReason, SamplingParams, TokenLogprob
from ._generation import Emit, Producer
from ._http import HttpEngine, HttpOptions, int_list
from ._logprobs import MalformedLogprobs, from_completions, from_entry

__all__ = ["COMPLETIONS_PATH", "GENERATE_PATH", "VLLMEngine", "completions_body", "generate_body"]

COMPLETIONS_PATH: Final = "/v1/completions"
GENERATE_PATH: Final = "/inference/v1/generate"

Api = Literal["auto", "generate", "completions"]


def _has_finish(payload: dict[str, Any]) -> bool:
    """Whether a stream event holds the choice's ``finish_reason`` (vLLM's last event)."""
    choices = payload.get("choices")
    return isinstance(choices, list) and any(
        isinstance(choice, dict) and choice.get("finish_reason") is not None for choice in choices
    )


class _NotFound(Exception):
    """The endpoint is not there (HTTP 404): try the other one."""


def sampling_fields(params: SamplingParams, grammar: str | None) -> dict[str, Any]:
    """vLLM ``SamplingParams`` fields for ``params`` (shared by both endpoints)."""
    fields: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "stop_token_ids": list(params.stop_token_ids),
        # The ids are what matter, but the text must keep harmony's specials too.
        "skip_special_tokens": False,
    }
    if params.seed is not None:
        fields["seed"] = params.seed
    if grammar is not None:
        fields["structured_outputs"] = {"grammar": grammar}
    if params.top_logprobs is not None:
        # The sampled id comes first in vLLM's list: one more keeps the true top n.
        fields["logprobs"] = min(params.top_logprobs + 1, MAX_TOP_LOGPROBS)
    return fields


def completions_body(
    prompt: Sequence[int], params: SamplingParams, grammar: str | None, model: str | None
) -> dict[str, Any]:
    """The ``/v1/completions`` request for ``prompt``."""
    body: dict[str, Any] = {"prompt": list(prompt), **sampling_fields(params, grammar)}
    if model is not None:
        body["model"] = model
    body.update(
        {"return_token_ids": True, "stream": True, "stream_options": {"include_usage": True}}
    )
    if params.top_logprobs is not None:
        body["return_tokens_as_token_ids"] = True  # alternatives keyed by id, not by text
    return body


def generate_body(
    prompt: Sequence[int], params: SamplingParams, grammar: str | None, model: str | None
) -> dict[str, Any]:
    """The ``/inference/v1/generate`` request for ``prompt``."""
    body: dict[str, Any] = {
        "token_ids": list(prompt),
        "sampling_params": sampling_fields(params, grammar),
        "stream": True,
    }
    if model is not None:
        body["model"] = model
    return body


class VLLMEngine(HttpEngine):
    """A vLLM server reached over HTTP (``base_url`` such as ``http://127.0.0.1:8000``).

    ``model`` names the served model (``None``: the server's only one);
    ``api`` picks the endpoint (see the module docs); ``llguidance`` is the
    version of llguidance the server runs (``"1.7"`` for vLLM 0.32/0.33), which
    grammars are written for; ``api_key`` (or the
    ``VLLM_API_KEY`` environment variable, ``api_key_env``) is sent as a
    bearer token; ``options`` sets timeouts (:class:`HttpOptions`).

    .. code-block:: python

        engine = VLLMEngine("http://127.0.0.1:8000", model="openai/gpt-oss-20b")
        async for ids in engine.generate(prompt_ids, SamplingParams(max_tokens=512)):
            ...
    """

    name = "vllm"

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api: Api = "auto",
        llguidance: str = "1.7",
        api_key: str | None = None,
        api_key_env: str | None = "VLLM_API_KEY",
        options: HttpOptions | None = None,
    ) -> None:
        if api not in ("auto", "generate", "completions"):
            raise InputError(f"api must be 'auto', 'generate' or 'completions', not {api!r}")
        super().__init__(base_url, api_key, api_key_env, options)
        self.model = model
        self.api: Api = api
        if not isinstance(llguidance, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", llguidance):
            raise InputError(f"llguidance must be a version such as '1.7', not {llguidance!r}")
        self.llguidance = llguidance

    def __repr__(self) -> str:
        return f"VLLMEngine({self.base_url!r}, model={self.model!r}, api={self.api!r})"

    def _producer(
        self, ids: tuple[int, ...], params: SamplingParams, constraint: Constraint | None
    ) -> Producer:
        """A streamed generation on the server (the grammar built now: a refusal raises here)."""
        grammar = None
        if constraint is not None:
            from harmonia.constrained import grammar_for_llguidance

            lark = constraint.require_grammar(self.name, self.base_url)
            grammar = grammar_for_llguidance(lark, self.llguidance)

        async def produce(emit: Emit) -> Finish:
            if self.api in ("auto", "generate"):
                body = generate_body(ids, params, grammar, self.model)
                try:
                    return await self._stream(GENERATE_PATH, body, params, emit)
                except _NotFound:
                    if self.api == "generate":
                        url = self.base_url + GENERATE_PATH
                        raise self._http.error(
                            "HTTP 404: this server has no tokens-in/tokens-out endpoint; "
                            "use api='completions'",
                            url,
                        ) from None
                    self.api = "completions"  # remembered: one probe per engine
            body = completions_body(ids, params, grammar, self.model)
            return await self._stream(COMPLETIONS_PATH, body, params, emit)

        return produce

    async def _stream(
        self, path: str, body: dict[str, Any], params: SamplingParams, emit: Emit
    ) -> Finish:
        url = self.base_url + path
        not_found = _NotFound if path == GENERATE_PATH else None
        last: int | None = None
        with_logprobs = params.top_logprobs is not None

        def on_batch(batch: list[dict[str, Any]]) -> Finish | None:
            # Every id of a read goes on in one emit (the logprobs, when asked, per choice).
            nonlocal last
            ids: list[int] = []
            for payload in batch:
                choices = payload.get("choices")
                if not isinstance(choices, list):
                    raise self._http.error(f"malformed stream data: no choices in {payload!r}", url)
                for choice in choices:  # one choice (n=1); a usage-only chunk has none
                    if not isinstance(choice, dict):
                        raise self._http.error(f"malformed stream data: choice {choice!r}", url)
                    new = int_list(choice.get("token_ids"), "token_ids", self._http, url)
                    if new:
                        last = new[-1]
                        if with_logprobs:
                            emit(new, self._logprobs(choice, path, params, url))
                        else:
                            ids += new
                    reason = choice.get("finish_reason")
                    if reason is not None:
                        if ids:
                            emit(ids)
                        stop = choice.get("stop_reason")
                        return self._finish(reason, stop, last, params, emit, url)
            if ids:
                emit(ids)
            return None

        finish = await self._http.stream_batches(
            path, body, on_batch, not_found=not_found, last=_has_finish
        )
        if finish is None:
            raise self._http.error("the stream ended without a finish_reason", url)
        return finish

    def _logprobs(
        self, choice: dict[str, Any], path: str, params: SamplingParams, url: str
    ) -> list[TokenLogprob] | None:
        """The choice's log-probabilities (``None`` when none were asked for)."""
        n = params.top_logprobs
        if n is None:
            return None
        raw = choice.get("logprobs")
        try:
            if path == GENERATE_PATH:
                content = raw.get("content") if isinstance(raw, dict) else None
                if not isinstance(content, list):
                    raise MalformedLogprobs(f"logprobs is {raw!r}, not {{'content': [...]}}")
                return [from_entry(entry, n) for entry in content]
            return from_completions(raw, n)
        except MalformedLogprobs as exc:
            raise self._http.error(f"malformed stream data: {exc}", url) from None

    def _finish(
        self,
        reason: Any,
        stop_reason: Any,
        last: int | None,
        params: SamplingParams,
        emit: Emit,
        url: str,
    ) -> Finish:
        if reason == "length":
            return Finish(FinishReason.LENGTH)
        if reason == "stop":
            if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):
                if stop_reason != last:
                    # Servers that leave the stop id out of token_ids: put it back, the
                    # harmony parser needs it (emit ends the generation on it).
                    if params.top_logprobs is not None:
                        raise self._http.error(
                            f"the server left the stop id {stop_reason} out of token_ids, "
                            "and its log-probability with it; ids and logprobs would no "
                            "longer line up",
                            url,
                        )
                    emit([stop_reason])
                return Finish(FinishReason.STOP, stop_token=stop_reason)
            # The model's own end-of-sequence id (or a stop string): the last id.
            return Finish(FinishReason.STOP, stop_token=last)
        if reason == "abort":
            raise self._http.error("the server aborted the request", url)
        raise self._http.error(f"the request ended with finish_reason {reason!r}", url)
