"""Training data for gpt-oss: harmony token ids with loss masks from provenance.

The renderer says which message and part produced every token; a
:class:`TrainPolicy` turns that into a mask. Presets reproduce what TRL, Unsloth,
Megatron-Bridge and others train, so they can be compared (docs/training.md).
Importing this package imports neither pyarrow, datasets nor ray.
"""

from ._policy import PRESETS, TrainPolicy
from ._sample import IGNORE_INDEX, TrainSample, render_for_training

__all__ = ["IGNORE_INDEX", "PRESETS", "TrainPolicy", "TrainSample", "render_for_training"]
