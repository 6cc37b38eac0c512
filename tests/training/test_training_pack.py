"""Packing (best-fit decreasing, per shard) and the flat memmap export."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")

import numpy as np
import pyarrow.parquet as pq

from harmonia.training import BuildOptions, build, pack
from harmonia.training._cli import main
from harmonia.training._pack import best_fit_decreasing


def test_best_fit_decreasing_fills_rows_and_keeps_every_sample() -> None:
    rng = random.Random(3)
    lengths = [rng.randint(1, 100) for _ in range(300)]
    rows = best_fit_decreasing(lengths, 128)
    assert sorted(i for row in rows for i in row) == list(range(300))
    assert all(sum(lengths[i] for i in row) <= 128 for row in rows)
    # Within one row of the lower bound on this easy distribution.
    assert len(rows) <= -(-sum(lengths) // 128) + 1
    assert best_fit_decreasing([5, 3, 2], 5) == [[0], [1, 2]]


def test_pack_keeps_every_token_and_mask(corpus: Path, tmp_path: Path) -> None:
    built = tmp_path / "built"
    build([corpus], built, options=BuildOptions(shard_rows=100, progress="none"))
    samples = pq.read_table(sorted(built.glob("part-*.parquet"))).to_pylist()
    seq_len = 2048
    summary = pack(built, tmp_path / "packed", seq_len)
    rows = pq.read_table(sorted((tmp_path / "packed").glob("packed-*.parquet"))).to_pylist()
    fitting = [s for s in samples if s["length"] <= seq_len]
    assert summary["samples"] == len(fitting) and summary["too_long"] == len(samples) - len(fitting)
    pieces = []
    for row in rows:
        assert len(row["input_ids"]) == sum(row["seq_lengths"]) <= seq_len
        assert row["seq_start_id"] == [0, *np.cumsum(row["seq_lengths"])[:-1].tolist()]
        for start, size in zip(row["seq_start_id"], row["seq_lengths"], strict=True):
            pieces.append(
                (row["input_ids"][start : start + size], row["loss_mask"][start : start + size])
            )
    key = lambda p: (p[0], p[1])  # noqa: E731
    assert sorted(pieces, key=key) == sorted(
        ((s["input_ids"], s["loss_mask"]) for s in fitting), key=key
    )
    assert 0 < summary["efficiency"] <= 1


def test_memmap_export_and_the_cli(corpus: Path, tmp_path: Path) -> None:
    built = tmp_path / "built"
    build([corpus], built, options=BuildOptions(shard_rows=100, progress="none"))
    samples = pq.read_table(sorted(built.glob("part-*.parquet"))).to_pylist()
    out = io.StringIO()
    assert main(["export", str(built), "-o", str(tmp_path / "mm")], stdout=out) == 0
    tokens = np.memmap(tmp_path / "mm" / "tokens.u32", dtype="<u4", mode="r")
    mask = np.memmap(tmp_path / "mm" / "mask.u8", dtype=np.uint8, mode="r")
    offsets = np.fromfile(tmp_path / "mm" / "offsets.i64", dtype="<i8")
    assert len(offsets) == len(samples) + 1 and int(tokens.max()) > 65535  # uint16 would not do
    for i, sample in enumerate(samples):
        a, b = offsets[i], offsets[i + 1]
        assert tokens[a:b].tolist() == sample["input_ids"]
        assert mask[a:b].astype(bool).tolist() == sample["loss_mask"]
    assert (
        main(["pack", str(built), "-o", str(tmp_path / "p"), "--seq-len", "4096"], stdout=out) == 0
    )
    assert "filled" in out.getvalue()
    assert json.loads((tmp_path / "p" / "pack.json").read_text())["seq_len"] == 4096
    built_hf = tmp_path / "hf"
    build([corpus], built_hf, options=BuildOptions(profile="hf", progress="none"))
    assert main(["export", str(built_hf), "-o", str(tmp_path / "x")]) == 1  # needs canonical
