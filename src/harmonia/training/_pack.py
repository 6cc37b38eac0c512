"""After the build: packing samples into fixed-length rows, and a flat memmap form.

Packing is a separate step so that one unpacked build can feed several trainers.
Each input shard is packed on its own (memory stays one shard), best-fit
decreasing: longest samples first, each into the fullest row it still fits, so
the output depends only on the shard, never on timing. A packed row holds
``input_ids``, ``loss_mask`` and where its samples start: ``seq_lengths`` (TRL's
padding-free collator) and ``seq_start_id`` (Megatron-Bridge's packed Parquet).

The memmap form is three flat files any loader can map with numpy:
``tokens.u32`` (uint32: gpt-oss ids go past 65535), ``mask.u8`` and
``offsets.i64`` (sample ``i`` is ``[offsets[i], offsets[i+1])``).
"""

from __future__ import annotations

import bisect
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harmonia import InputError

from ._arrow import require_pyarrow, write_parquet
from ._runner import MANIFEST, missing_manifest


def _shards(build_dir: Path) -> list[Path]:
    manifest = build_dir / MANIFEST
    if not manifest.exists():
        raise missing_manifest(build_dir)
    data = json.loads(manifest.read_text(encoding="utf-8"))
    if data.get("profile") != "canonical":
        raise InputError(
            f"{build_dir} was built with --columns {data.get('profile')}: "
            "packing and export need the canonical columns"
        )
    return [build_dir / shard["file"] for shard in data["shards"]]


def _flat(table: Any) -> tuple[Any, Any, Any]:
    """A shard's ids and mask as flat numpy arrays, and where each sample starts in them
    (from 0, one more entry than samples)."""
    ids = table.column("input_ids").combine_chunks()
    mask = table.column("loss_mask").combine_chunks().flatten()
    starts = ids.offsets.to_numpy() - ids.offsets[0].as_py()
    flat_ids = ids.flatten().to_numpy(zero_copy_only=False)
    return flat_ids, mask.to_numpy(zero_copy_only=False), starts


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Rows of sample indices, each row's lengths summing to at most ``capacity``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    # (free space, row number), kept sorted: the first entry with enough space is
    # the fullest row the sample fits in.
    free: list[tuple[int, int]] = []
    for i in order:
        size = lengths[i]
        at = bisect.bisect_left(free, (size, -1))
        if at == len(free):
            rows.append([i])
            bisect.insort(free, (capacity - size, len(rows) - 1))
        else:
            space, row = free.pop(at)
            rows[row].append(i)
            bisect.insort(free, (space - size, row))
    return rows


def pack(
    build_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], seq_len: int
) -> dict[str, Any]:
    """Pack a canonical build into rows of at most ``seq_len`` tokens; returns counts.

    Samples longer than ``seq_len`` are left out and counted.
    """
    if seq_len < 1:
        raise InputError("seq_len must be at least 1")
    pa = require_pyarrow()
    import numpy as np

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    totals = Counter({"samples": 0, "rows": 0, "tokens": 0, "slots": 0, "too_long": 0})
    shards = []
    for k, shard in enumerate(_shards(Path(build_dir))):
        table = pa.parquet.read_table(shard, columns=["input_ids", "loss_mask", "length"])
        lengths = table.column("length").to_pylist()
        fits = [i for i, n in enumerate(lengths) if n <= seq_len]
        totals["too_long"] += len(lengths) - len(fits)
        flat_ids, flat_mask, starts = _flat(table)
        rows = best_fit_decreasing([lengths[i] for i in fits], seq_len)
        row_ids: list[Any] = []
        row_mask: list[Any] = []
        row_lengths: list[list[int]] = []
        for row in rows:
            members = [fits[j] for j in sorted(row)]  # keep input order inside a row
            row_ids.append(np.concatenate([flat_ids[starts[i] : starts[i + 1]] for i in members]))
            row_mask.append(np.concatenate([flat_mask[starts[i] : starts[i + 1]] for i in members]))
            row_lengths.append([lengths[i] for i in members])
        seq_start = [[0, *np.cumsum(r)[:-1].tolist()] for r in row_lengths]
        ints, bools = pa.list_(pa.int32()), pa.list_(pa.bool_())
        packed = pa.table(
            {
                "input_ids": pa.array(row_ids, type=ints),
                "loss_mask": pa.array(row_mask, type=bools),
                "seq_lengths": pa.array(row_lengths, type=ints),
                "seq_start_id": pa.array(seq_start, type=ints),
            }
        )
        name = f"packed-{k:05d}.parquet"
        write_parquet(packed, out / name)
        tokens = sum(sum(r) for r in row_lengths)
        totals.update(samples=len(fits), rows=len(rows), tokens=tokens, slots=len(rows) * seq_len)
        shards.append({"file": name, "rows": len(rows), "tokens": tokens})
    summary = {
        "seq_len": seq_len,
        **totals,
        "efficiency": round(totals["tokens"] / totals["slots"], 6) if totals["slots"] else 0.0,
        "shards": shards,
    }
    (out / "pack.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def export_memmap(build_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> int:
    """Write ``tokens.u32``, ``mask.u8`` and ``offsets.i64``; returns the sample count."""
    pa = require_pyarrow()
    import numpy as np

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    offsets = [0]
    with (out / "tokens.u32").open("wb") as tokens, (out / "mask.u8").open("wb") as masks:
        for shard in _shards(Path(build_dir)):
            table = pa.parquet.read_table(shard, columns=["input_ids", "loss_mask"])
            ids, mask, starts = _flat(table)
            tokens.write(ids.astype("<u4").tobytes())
            masks.write(mask.astype(np.uint8).tobytes())
            offsets += (starts[1:].astype(np.int64) + offsets[-1]).tolist()
    np.asarray(offsets, dtype="<i8").tofile(out / "offsets.i64")
    return len(offsets) - 1
