"""What trainers read: the Parquet output through ``datasets``, and the same batch
function inside ``datasets.map`` and Ray Data giving the built-in runner's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")

import pyarrow.parquet as pq  # noqa: E402  (after the skip)

from harmonia.training import BuildOptions, HFMapper, RayMapper, build  # noqa: E402


def runner_rows(corpus: Path, out: Path) -> list[dict[str, Any]]:
    build([corpus], out, options=BuildOptions(shard_rows=1000, progress="none"))
    rows: list[dict[str, Any]] = pq.read_table(sorted(out.glob("part-*.parquet"))).to_pylist()
    return rows


def data_lines(corpus: Path) -> list[tuple[int, str]]:
    lines = corpus.read_text(encoding="utf-8").splitlines()
    return [(n, line) for n, line in enumerate(lines, 1) if line.strip()]


def test_output_loads_with_the_columns_trainers_expect(corpus: Path, tmp_path: Path) -> None:
    canonical = runner_rows(corpus, tmp_path / "canonical")
    for profile, columns in [
        ("hf", ["input_ids", "attention_mask", "labels"]),
        ("trl", ["input_ids", "assistant_masks"]),
    ]:
        out = tmp_path / profile
        build([corpus], out, options=BuildOptions(profile=profile, progress="none"))  # type: ignore[arg-type]
        ds = datasets.load_dataset(
            "parquet", data_files=sorted(map(str, out.glob("part-*.parquet"))), split="train"
        )
        assert ds.column_names == columns
        assert len(ds) == len(canonical)
        for row, base in zip(ds, canonical, strict=True):
            assert row["input_ids"] == base["input_ids"]
            if profile == "hf":
                assert row["attention_mask"] == [1] * len(base["input_ids"])
                assert row["labels"] == [
                    t if m else -100
                    for t, m in zip(base["input_ids"], base["loss_mask"], strict=True)
                ]
            else:
                assert row["assistant_masks"] == [int(m) for m in base["loss_mask"]]
    ds = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "canonical" / "part-00000.parquet"), split="train"
    )
    assert {"input_ids", "loss_mask", "length", "n_trained", "source_line"} <= set(ds.column_names)


def test_datasets_map_gives_the_runner_rows(corpus: Path, tmp_path: Path) -> None:
    expected = runner_rows(corpus, tmp_path / "runner")
    lines = data_lines(corpus)
    ds = datasets.Dataset.from_dict({"text": [line for _, line in lines]})
    mapped = ds.map(
        HFMapper(), batched=True, batch_size=64, with_indices=True, remove_columns=["text"]
    )
    got = mapped.to_list()
    keys = ("input_ids", "loss_mask", "length", "n_trained", "sample_index")
    assert [{k: r[k] for k in keys} for r in got] == [{k: r[k] for k in keys} for r in expected]


def test_ray_data_gives_the_runner_rows(corpus: Path, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="the ray extra (ray[data]) is not installed")
    expected = runner_rows(corpus, tmp_path / "runner")
    items = [{"text": line, "line": n} for n, line in data_lines(corpus)]
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        ds = ray.data.from_items(items).map_batches(
            RayMapper, batch_format="pyarrow", batch_size=64, concurrency=1
        )
        got = ds.take_all()
    finally:
        ray.shutdown()
    keys = ("input_ids", "loss_mask", "source_line", "sample_index")
    assert [
        {k: list(r[k]) if k in ("input_ids", "loss_mask") else r[k] for k in keys} for r in got
    ] == [{k: r[k] for k in keys} for r in expected]
