"""Engines: prompt token ids in, sampled token ids out, with a reason to stop.

:class:`Engine` is the protocol (``generate`` returns a :class:`Generation`
handle to iterate, inspect and cancel); :class:`SyncEngine` drives any engine
from blocking code. Backends: :class:`ScriptedEngine` (replays scripts, for
tests and demos), ``TransformersEngine`` (in process,
``harmonia.engines.transformers``), ``VLLMEngine`` (``harmonia.engines.vllm``)
and ``LlamaCppEngine`` (``harmonia.engines.llamacpp``), each importing its
optional dependencies only when used. See ``docs/engines.md``.
"""

from ._base import (
    HARMONY_STOP_TOKEN_IDS,
    MAX_TOP_LOGPROBS,
    Completion,
    Constraint,
    Engine,
    EngineRefusedError,
    Finish,
    FinishReason,
    SamplingParams,
    TokenLogprob,
    TokenMatcher,
    UnsupportedConstraintError,
    UnsupportedParameterError,
    Usage,
    refuse_logprobs,
)
from ._generation import Emit, Generation, Producer
from ._http import HttpOptions
from ._spec import EngineSpec
from ._sync import SyncEngine, SyncGeneration
from .scripted import Script, ScriptedEngine

__all__ = [
    "HARMONY_STOP_TOKEN_IDS",
    "MAX_TOP_LOGPROBS",
    "Completion",
    "Constraint",
    "Emit",
    "Engine",
    "EngineRefusedError",
    "EngineSpec",
    "Finish",
    "FinishReason",
    "Generation",
    "HttpOptions",
    "Producer",
    "SamplingParams",
    "Script",
    "ScriptedEngine",
    "SyncEngine",
    "SyncGeneration",
    "TokenLogprob",
    "TokenMatcher",
    "UnsupportedConstraintError",
    "UnsupportedParameterError",
    "Usage",
    "refuse_logprobs",
]
