"""Training rows as Arrow tables and Parquet shards (pyarrow is imported here only).

Column profiles: ``canonical`` (``input_ids`` list<int32>, ``loss_mask`` list<bool>,
``length``, ``n_trained``, ``source_file``, ``source_line``, ``sample_index``),
``trl`` (``input_ids``, ``assistant_masks``) and ``hf`` (exactly ``input_ids``,
``attention_mask``, ``labels`` with -100: what Axolotl and LLaMA-Factory read).
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from harmonia import InputError
from harmonia._errors import check_choice, install_hint

from ._sample import IGNORE_INDEX

if TYPE_CHECKING:
    import pyarrow as pa

    from ._batch import Batch

Profile = Literal["canonical", "trl", "hf"]
PROFILES: Final[tuple[Profile, ...]] = get_args(Profile)


def require_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError(f"writing Parquet needs pyarrow: {install_hint('parquet')}") from None
    return pyarrow


def batch_table(batch: Batch, profile: Profile = "canonical", source_file: int = 0) -> pa.Table:
    """The rows of ``batch`` as one Arrow table in ``profile``'s columns."""
    check_choice(profile, PROFILES, "column profile")
    pa = require_pyarrow()
    import numpy as np

    lengths = np.fromiter(
        (len(ids) for ids in batch.input_ids), dtype=np.int32, count=len(batch.input_ids)
    )
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    ids = np.fromiter(chain.from_iterable(batch.input_ids), dtype=np.int32, count=total)
    mask = np.frombuffer(b"".join(batch.loss_mask), dtype=np.uint8)
    pa_offsets = pa.array(offsets)

    def lists(values: Any) -> Any:
        return pa.ListArray.from_arrays(pa_offsets, pa.array(values))

    if profile == "trl":
        return pa.table({"input_ids": lists(ids), "assistant_masks": lists(mask.astype(np.int8))})
    if profile == "hf":
        labels = np.where(mask.astype(bool), ids, np.int32(IGNORE_INDEX)).astype(np.int32)
        return pa.table(
            {
                "input_ids": lists(ids),
                "attention_mask": lists(np.ones(total, dtype=np.int8)),
                "labels": lists(labels),
            }
        )
    n_trained = (
        np.add.reduceat(mask, offsets[:-1], dtype=np.int64) if total else np.zeros(len(lengths))
    )
    n_trained = np.where(lengths > 0, n_trained, 0).astype(np.int32)
    return pa.table(
        {
            "input_ids": lists(ids),
            "loss_mask": lists(mask.astype(bool)),
            "length": pa.array(lengths),
            "n_trained": pa.array(n_trained),
            "source_file": pa.array(np.full(len(lengths), source_file, dtype=np.int32)),
            "source_line": pa.array(np.asarray(batch.source_line, dtype=np.int64)),
            "sample_index": pa.array(np.asarray(batch.sample_index, dtype=np.int32)),
        }
    )


def write_parquet(table: pa.Table, path: Path, compression: str = "zstd") -> None:
    """Write ``table`` to ``path`` atomically (a temporary name, then a rename)."""
    pa = require_pyarrow()
    tmp = path.with_name(path.name + ".tmp")
    pa.parquet.write_table(table, tmp, compression=compression)
    tmp.replace(path)
