"""Training data for gpt-oss: harmony token ids with loss masks from provenance.

The renderer says which message and part produced every token; a
:class:`TrainPolicy` turns that into a mask. Presets reproduce what TRL, Unsloth,
Megatron-Bridge and others train, so they can be compared (docs/training.md).
Importing this package imports neither pyarrow, datasets nor ray.
"""

from ._adapters import HFMapper, RayMapper
from ._batch import Batch, Stats, render_batch
from ._hf_template import render_hf_for_training
from ._inputs import DIALECTS, INPUT_FORMATS, InputOptions
from ._pack import export_memmap, pack
from ._policy import PRESETS, TrainPolicy
from ._problems import CODES, Problem
from ._runner import BuildOptions, build
from ._sample import IGNORE_INDEX, TrainSample, render_for_training

__all__ = [
    "CODES",
    "DIALECTS",
    "IGNORE_INDEX",
    "INPUT_FORMATS",
    "PRESETS",
    "Batch",
    "BuildOptions",
    "HFMapper",
    "InputOptions",
    "Problem",
    "RayMapper",
    "Stats",
    "TrainPolicy",
    "TrainSample",
    "build",
    "export_memmap",
    "pack",
    "render_batch",
    "render_for_training",
    "render_hf_for_training",
]
