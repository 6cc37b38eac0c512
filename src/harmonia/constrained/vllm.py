"""vLLM's entry point: ``--logits-processors harmonia.constrained.vllm:HarmonyLogitsProcessor``.

The class is built on first access (PEP 562), so this module imports without
vLLM; accessing ``HarmonyLogitsProcessor`` needs vLLM installed. See
:func:`harmonia.constrained.vllm_logits_processor_class`.
"""

from __future__ import annotations

from ._adapters import vllm_logits_processor_class


def __getattr__(name: str) -> type:
    if name == "HarmonyLogitsProcessor":
        return vllm_logits_processor_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
