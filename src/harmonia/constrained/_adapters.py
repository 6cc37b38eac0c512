"""Logits-processor adapters for vLLM and Hugging Face transformers.

Both engines call a logits processor once per generation step with the tokens
generated so far and the next-token logits; the adapters keep a
:class:`~harmonia.constrained.TurnMatcher` in step with those tokens and set the
logits of every disallowed token to ``-inf``.

* :class:`HarmonyLogitsProcessor` is vLLM's per-request interface,
  ``(output_token_ids, logits) -> logits``: V0's ``SamplingParams.logits_processors``,
  and what V1's ``AdapterLogitsProcessor`` wraps.
* :func:`vllm_logits_processor_class` builds the V1 batch-level class (loaded by
  vLLM as ``harmonia.constrained.vllm:HarmonyLogitsProcessor``); a request opts in
  with ``SamplingParams(extra_args={"harmonia_grammar": lark_text})``.
* :class:`TransformersLogitsProcessor` is a transformers ``LogitsProcessor``
  (``model.generate(..., logits_processor=LogitsProcessorList([it]))``).

Logits may be numpy arrays or torch tensors (on any device); torch, vLLM and
transformers are imported only when their objects are handed in. Once a turn is
finished (``<|call|>`` or ``<|return|>`` sampled) its logits are left alone:
configure the engine to stop on those tokens
(``HarmonyEncoding.stop_tokens_for_assistant_actions()``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import numpy as np

from .._errors import InputError, InputTypeError
from ._mask import (
    MASK_WORDS,
    TurnMatcher,
    _mask_bits,
    apply_mask,
    optional_module,
)

#: The ``SamplingParams.extra_args`` key that carries a request's grammar (Lark text).
VLLM_EXTRA_ARG: Final = "harmonia_grammar"

Logits = TypeVar("Logits")


def mask_logits(logits: Logits, mask: np.ndarray[Any, np.dtype[np.int32]]) -> Logits:
    """Set disallowed logits to ``-inf`` in place; numpy arrays and torch tensors.

    The last axis is the vocabulary; a longer (padded) one is masked past the end
    of o200k_harmony, a shorter one (gpt-oss's 201,088 logits) is cut.
    """
    if isinstance(logits, np.ndarray):
        apply_mask(logits, mask)
        return logits
    if not type(logits).__module__.startswith("torch"):
        raise InputTypeError(f"logits must be a numpy array or a torch tensor, not {type(logits)}")
    torch = optional_module("torch", "this adapter needs torch installed")
    tensor: Any = logits
    bits = torch.from_numpy(_mask_bits(mask, tensor.shape[-1])).to(tensor.device)
    known = _torch_float_bits(torch).get(tensor.dtype)
    if known is None:  # other dtypes: torch's (branching) masked fill
        tensor.masked_fill_(bits == 0, float("-inf"))
        return logits
    # Branch-free on the floats' bits, as apply_mask does (bfloat16 included).
    int_type, neg_inf = known
    keep = bits.to(int_type).neg_()  # all ones where allowed, 0 where not
    words = tensor.view(int_type)
    words &= keep
    words |= keep.bitwise_not_().bitwise_and_(neg_inf)
    return logits


@functools.cache
def _torch_float_bits(torch: Any) -> dict[Any, tuple[Any, int]]:
    """torch float dtype -> (the int dtype of its width, the bits of ``-inf`` in it)."""
    pairs = (
        (torch.float16, torch.int16),
        (torch.bfloat16, torch.int16),
        (torch.float32, torch.int32),
        (torch.float64, torch.int64),
    )
    return {f: (i, int(torch.tensor(float("-inf"), dtype=f).view(i).item())) for f, i in pairs}


class HarmonyLogitsProcessor:
    """A per-request logits processor: ``processor(output_token_ids, logits) -> logits``.

    ``output_token_ids`` are the tokens generated so far in this request (the
    prompt excluded); the processor consumes the new ones, then masks ``logits``
    in place. Rewinds and re-orderings are followed (:meth:`TurnMatcher.sync`).
    """

    def __init__(self, matcher: TurnMatcher) -> None:
        self.matcher = matcher
        self._mask = np.zeros(MASK_WORDS, dtype=np.int32)

    def __call__(self, output_token_ids: Sequence[int], logits: Logits) -> Logits:
        self.matcher.sync(output_token_ids)
        if self.matcher.is_finished:
            return logits
        return mask_logits(logits, self.matcher.fill_mask(self._mask))


class TransformersLogitsProcessor:
    """A transformers logits processor for ``model.generate``.

    One matcher per batch row (copies of ``matcher``). The prompt length is taken
    from the first call (transformers first calls with the prompt alone) unless
    given; use a fresh processor, or :meth:`reset`, for each ``generate`` call.
    """

    def __init__(self, matcher: TurnMatcher, prompt_length: int | None = None) -> None:
        self._template = matcher
        self._given_length = prompt_length
        self._prompt_length = prompt_length
        self._rows: list[HarmonyLogitsProcessor] = []

    def reset(self) -> None:
        """Forget every row, for the next ``generate`` call."""
        self._rows = []
        self._prompt_length = self._given_length

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self._prompt_length is None:
            self._prompt_length = int(input_ids.shape[1])
        while len(self._rows) < scores.shape[0]:
            self._rows.append(HarmonyLogitsProcessor(self._template.copy()))
        for row in range(scores.shape[0]):
            generated = input_ids[row, self._prompt_length :].tolist()
            # Rows are masked in place; a finished row (padding) is left alone.
            self._rows[row](generated, scores[row])
        return scores


@functools.cache
def vllm_logits_processor_class() -> type:
    """vLLM's V1 batch-level logits processor class (needs vLLM installed).

    Built on ``vllm.v1.sample.logits_processor.AdapterLogitsProcessor``: vLLM
    keeps one :class:`HarmonyLogitsProcessor` per request that carries
    ``extra_args={"harmonia_grammar": lark_text}`` (from
    :func:`build_turn_grammar`); other requests are untouched. Load it with
    ``LLM(..., logits_processors=[cls])`` or
    ``vllm serve ... --logits-processors harmonia.constrained.vllm:HarmonyLogitsProcessor``.
    """
    module = optional_module("vllm.v1.sample.logits_processor", "this adapter needs vllm installed")
    base = module.AdapterLogitsProcessor

    class HarmonyVllmLogitsProcessor(base):  # type: ignore[misc, valid-type]
        """Masks every request that carries a harmonia turn grammar."""

        @classmethod
        def validate_params(cls, params: Any) -> None:
            # Called by vLLM when a request arrives: a bad grammar is the
            # request's fault (InputError is a ValueError, which vLLM reports).
            grammar = _request_grammar(params)
            if grammar is not None:
                TurnMatcher(grammar)

        def is_argmax_invariant(self) -> bool:
            return False  # a mask changes which token is the most likely

        def new_req_logits_processor(self, params: Any) -> HarmonyLogitsProcessor | None:
            grammar = _request_grammar(params)
            return None if grammar is None else HarmonyLogitsProcessor(TurnMatcher(grammar))

    # Named as vLLM loads it, so that pickling it (to engine processes) finds it again.
    HarmonyVllmLogitsProcessor.__module__ = "harmonia.constrained.vllm"
    HarmonyVllmLogitsProcessor.__name__ = "HarmonyLogitsProcessor"
    HarmonyVllmLogitsProcessor.__qualname__ = "HarmonyLogitsProcessor"
    return HarmonyVllmLogitsProcessor


def _request_grammar(params: Any) -> str | None:
    extra = getattr(params, "extra_args", None) or {}
    grammar = extra.get(VLLM_EXTRA_ARG)
    if grammar is not None and not isinstance(grammar, str):
        raise InputError(f"extra_args[{VLLM_EXTRA_ARG!r}] must be Lark text (a str)")
    return grammar
