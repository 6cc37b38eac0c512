"""Constrained decoding for gpt-oss: the grammar of the next assistant turn, and masks.

The grammar is generated from the same conversation the prompt is rendered from
(declared tools, built-in tools, response format, channels), so the two cannot
drift. :func:`build_turn_grammar` exports it as Lark text (llguidance's
dialect); :class:`TurnMatcher` follows a turn token by token and gives the
allowed-token bitmask (needs the ``constrained`` extra); the
adapters plug it into vLLM and transformers. See ``docs/constrained-decoding.md``.
"""

from ._adapters import (
    VLLM_EXTRA_ARG,
    HarmonyLogitsProcessor,
    TransformersLogitsProcessor,
    mask_logits,
    vllm_logits_processor_class,
)
from ._grammar import GrammarOptions, build_turn_grammar, grammar_for_llguidance
from ._mask import (
    HARMONY_SPECIAL_TOKENS,
    MASK_WORDS,
    VOCAB_SIZE,
    ConstrainedUnavailableError,
    GrammarEngineError,
    TokenRejectedError,
    TurnMatcher,
    apply_mask,
    mask_to_bool,
)

__all__ = [
    "HARMONY_SPECIAL_TOKENS",
    "MASK_WORDS",
    "VLLM_EXTRA_ARG",
    "VOCAB_SIZE",
    "ConstrainedUnavailableError",
    "GrammarEngineError",
    "GrammarOptions",
    "HarmonyLogitsProcessor",
    "TokenRejectedError",
    "TransformersLogitsProcessor",
    "TurnMatcher",
    "apply_mask",
    "build_turn_grammar",
    "grammar_for_llguidance",
    "mask_logits",
    "mask_to_bool",
    "vllm_logits_processor_class",
]
