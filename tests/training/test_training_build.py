"""``build``: shards, rejects, manifest; the same bytes for any worker count; resume."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")

import pyarrow.parquet as pq

from harmonia import InputError
from harmonia.training import BuildOptions, build


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_one_and_two_workers_write_the_same_bytes(corpus: Path, tmp_path: Path) -> None:
    one = tmp_path / "one"
    two = tmp_path / "two"
    manifest = build([corpus], one, options=BuildOptions(workers=1, shard_rows=50, progress="none"))
    build([corpus], two, options=BuildOptions(workers=2, shard_rows=50, progress="none"))
    assert files(one) == files(two)
    names = sorted(files(one))
    assert names == [
        "manifest.json",
        *(f"part-{k:05d}.parquet" for k in range(5)),
        "rejects.jsonl",
        "stats.json",
    ]
    stats = manifest["stats"]
    assert stats["rows"] == 239  # 240 lines, one blank
    assert stats["rows_rejected"] == 6 and stats["problems"]["E101"] == 6
    assert stats["problems"]["W203"] > 0  # multi-turn rows whose earlier reasoning is gone
    table = pq.read_table(sorted(one.glob("part-*.parquet")))
    assert table.num_rows == stats["samples"]
    assert sum(table.column("length").to_pylist()) == stats["tokens"]
    assert sum(table.column("n_trained").to_pylist()) == stats["trained_tokens"]
    lines = table.column("source_line").to_pylist()
    assert lines == sorted(lines) and 4 not in lines and 37 not in lines
    rejects = [json.loads(x) for x in (one / "rejects.jsonl").read_text().splitlines()]
    assert [(r["code"], r["line"]) for r in rejects] == [("E101", 37 * k) for k in range(1, 7)]
    assert rejects[0]["row"] == "{broken json"
    assert manifest["policy"]["turns"] == "faithful" and len(manifest["shards"]) == 5
    assert sum(stats["trained_by_channel"].values()) == stats["trained_tokens"]
    assert set(stats["trained_by_channel"]) <= {"analysis", "commentary", "final"}
    assert stats["trained_by_channel"]["analysis"] > 0 and stats["trained_by_channel"]["final"] > 0
    assert sum(stats["lengths"].values()) == stats["samples"]
    assert manifest["inputs"][0]["sha256"] and len(manifest["vocabulary_sha256"]) == 64
    assert (
        pq.ParquetFile(one / "part-00000.parquet").metadata.row_group(0).column(0).compression
        == "ZSTD"
    )


def test_a_second_build_into_the_same_directory_needs_resume(corpus: Path, tmp_path: Path) -> None:
    build([corpus], tmp_path / "o", options=BuildOptions(shard_rows=500, progress="none"))
    with pytest.raises(InputError, match="resume"):
        build([corpus], tmp_path / "o", options=BuildOptions(shard_rows=500, progress="none"))


def test_progress_lines_when_not_a_terminal(corpus: Path, tmp_path: Path) -> None:
    import io

    stream = io.StringIO()
    build([corpus], tmp_path / "o", options=BuildOptions(shard_rows=100), stream=stream)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and all("/s" in x and "ETA" in x for x in lines)
    assert lines[-1].startswith("shards 3/3")


KILLED_BUILD = """
import sys
from harmonia.training import BuildOptions, build
build([sys.argv[1]], sys.argv[2], options=BuildOptions(shard_rows=20, progress="lines"))
"""


def test_a_killed_build_resumes(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_BUILD, str(corpus), str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    line = child.stderr.readline()  # the first finished shard
    assert line.startswith("shards 1/12"), line
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    done = json.loads((out / ".progress.json").read_text())["shards"]
    assert 1 <= len(done) < 12 and not (out / "manifest.json").exists()
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    build([corpus], out, options=BuildOptions(shard_rows=20, resume=True, progress="none"))
    clean = tmp_path / "clean"
    build([corpus], clean, options=BuildOptions(shard_rows=20, progress="none"))
    assert files(out) == files(clean)
    # The shards finished before the kill were kept, not rewritten.
    for name in (json.loads(json.dumps(v))["file"] for v in done.values()):
        assert (out / name).stat().st_mtime_ns == before[name]


def test_a_gzip_input_builds_the_same_shards(corpus: Path, tmp_path: Path) -> None:
    packed = tmp_path / "corpus.jsonl.gz"
    packed.write_bytes(gzip.compress(corpus.read_bytes()))
    options = BuildOptions(workers=2, shard_rows=50, progress="none")
    plain = build([corpus], tmp_path / "plain", options=options)
    zipped = build([packed], tmp_path / "zipped", options=options)
    shards = files(tmp_path / "plain")
    assert {k: v for k, v in files(tmp_path / "zipped").items() if k.startswith("part-")} == {
        k: v for k, v in shards.items() if k.startswith("part-")
    }
    assert zipped["stats"] == plain["stats"]
    rejects = (tmp_path / "zipped" / "rejects.jsonl").read_text().splitlines()
    assert [json.loads(r)["line"] for r in rejects] == [37 * k for k in range(1, 7)]
    # The manifest hashes the file's bytes on disk.
    assert zipped["inputs"][0]["sha256"] == hashlib.sha256(packed.read_bytes()).hexdigest()
