"""``build``: JSONL files to Parquet shards, in worker processes, resumable.

The parent only plans and bookkeeps. It splits each input at every
``shard_rows``-th line (one streaming pass that also hashes the file); each task
is one byte range, rendered by a worker that writes its own shard and rejects and
returns counts only (sending tokens back to a parent costs more than rendering
them). Shards are numbered by input range, never by worker, and the manifest
holds nothing that depends on the worker count or the clock, so ``workers=1``
and ``workers=2`` write the same bytes. After each finished shard the parent
records it (with its sha256) in ``.progress.json``; ``resume=True`` skips the
recorded shards whose files still match.

A ``.gz`` input is read through gzip, streamed: its ranges are offsets into the
decompressed text (the file's hash is of its bytes on disk). gzip cannot seek,
so each worker decompresses, and throws away, the text before its own range:
plain JSONL is faster for many shards of one big file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Final, Literal, TextIO, cast

from harmonia import InputError

from ._arrow import Profile, batch_table, require_pyarrow, write_parquet
from ._batch import Stats, default_encoding, render_batch
from ._inputs import InputOptions
from ._policy import TrainPolicy, resolve_policy

ProgressMode = Literal["auto", "lines", "none"]
PROGRESS_FILE: Final = ".progress.json"
MANIFEST: Final = "manifest.json"
_READ_CHUNK: Final = 1 << 20


@dataclass(frozen=True)
class BuildOptions:
    """How ``build`` runs and writes (``workers`` changes speed, never the output)."""

    workers: int = 1
    shard_rows: int = 10_000
    profile: Profile = "canonical"
    compression: str = "zstd"
    resume: bool = False
    progress: ProgressMode = "auto"

    def __post_init__(self) -> None:
        if self.workers < 1 or self.shard_rows < 1:
            raise InputError("workers and shard_rows must be at least 1")


@dataclass(frozen=True)
class _Task:
    shard: int
    file_index: int
    path: str
    start: int
    end: int
    first_line: int


def build(
    inputs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    policy: TrainPolicy | str | None = None,
    input_options: InputOptions | None = None,
    options: BuildOptions | None = None,
    stream: TextIO | None = None,
) -> dict[str, Any]:
    """Build training shards from JSONL ``inputs`` into ``out_dir``; returns the manifest.

    Writes ``part-NNNNN.parquet`` (one per ``shard_rows`` input lines),
    ``rejects.jsonl``, ``stats.json`` and ``manifest.json``. Progress goes to
    ``stream`` (stderr by default).
    """
    require_pyarrow()
    policy = resolve_policy(policy)
    input_options = input_options or InputOptions()
    options = options or BuildOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(p) for p in inputs]
    for f in files:
        if not f.is_file():
            raise InputError(f"input {str(f)!r} is not a file")
    tasks, described = _plan(files, options.shard_rows)
    config = {
        "policy": policy.to_dict(),
        "input_options": _input_options_dict(input_options),
        "profile": options.profile,
        "compression": options.compression,
        "shard_rows": options.shard_rows,
        "inputs": described,
    }
    done = _resume_state(out, config, options.resume)
    todo = [t for t in tasks if str(t.shard) not in done["shards"]]
    report = _Progress(stream or sys.stderr, options.progress, len(tasks), len(tasks) - len(todo))

    def record(shard: int, result: dict[str, Any]) -> None:
        done["shards"][str(shard)] = result
        _write_json(out / PROGRESS_FILE, done)
        report.update(result)

    args = (policy, input_options, options.profile, options.compression, str(out))
    if options.workers == 1 or len(todo) <= 1:
        for task in todo:
            record(task.shard, _run_task(task, *args))
    else:
        _run_pool(todo, args, options.workers, record)
    report.finish()
    return _finish(out, tasks, done, config)


def _run_pool(
    todo: Sequence[_Task],
    args: tuple[Any, ...],
    workers: int,
    record: Callable[[int, dict[str, Any]], None],
) -> None:
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # Loaded before the fork, so children share them: the encoding, and pyarrow's
    # first array (which imports pandas when it is installed, about a second).
    default_encoding()
    require_pyarrow().array([0])
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        pending: dict[Future[dict[str, Any]], int] = {}
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < workers * 2:
                task = queue.pop(0)
                pending[pool.submit(_run_task, task, *args)] = task.shard
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                record(pending.pop(future), future.result())


def _plan(files: Sequence[Path], shard_rows: int) -> tuple[list[_Task], list[dict[str, Any]]]:
    """Cut every file at each ``shard_rows``-th line, hashing it in the same pass."""
    tasks: list[_Task] = []
    described: list[dict[str, Any]] = []
    for index, path in enumerate(files):
        digest = hashlib.sha256()
        starts = [0]
        lines = 0
        position = 0
        with path.open("rb") as raw:
            # The hash is of the bytes on disk; lines are counted in the text.
            hashed = _Hashing(raw, digest)
            handle = (
                _gzip().GzipFile(fileobj=cast(BinaryIO, hashed), mode="rb")
                if is_gzip(path)
                else hashed
            )
            while chunk := handle.read(_READ_CHUNK):
                at = chunk.find(b"\n")
                while at >= 0:
                    lines += 1
                    if lines % shard_rows == 0:
                        starts.append(position + at + 1)
                    at = chunk.find(b"\n", at + 1)
                position += len(chunk)
            while hashed.read(_READ_CHUNK):
                pass  # whatever gzip left unread still belongs to the file's hash
        if starts[-1] >= position and len(starts) > 1:
            starts.pop()
        bounds = [*starts, position]
        for k in range(len(starts)):
            tasks.append(
                _Task(len(tasks), index, str(path), bounds[k], bounds[k + 1], k * shard_rows + 1)
            )
        described.append({"path": str(path), "bytes": position, "sha256": digest.hexdigest()})
    return tasks, described


def is_gzip(path: Path | str) -> bool:
    """Inputs named ``*.gz`` are gzip-compressed."""
    return str(path).endswith(".gz")


def _gzip() -> ModuleType:
    """gzip, imported only when an input is compressed (``import harmonia.training``
    stays light)."""
    import gzip

    return gzip


def open_input(path: Path | str) -> BinaryIO:
    """An input file's text as bytes, decompressed (streamed) when it is ``.gz``."""
    if is_gzip(path):
        return cast(BinaryIO, _gzip().open(path, "rb"))
    return open(path, "rb")  # the caller closes it


class _Hashing:
    """A binary reader that hashes what it reads (one pass over a file for both)."""

    def __init__(self, raw: BinaryIO, digest: Any) -> None:
        self._raw = raw
        self._digest = digest

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._digest.update(data)
        return data


def _lines(task: _Task) -> Iterator[tuple[int, bytes]]:
    """The range's non-blank lines, as bytes: ``render_batch`` decodes each one and
    rejects a line that is not UTF-8 (E104)."""
    with open_input(task.path) as handle:
        handle.seek(task.start)  # gzip: decompresses up to the range (see the module doc)
        data = handle.read(task.end - task.start)
    for k, raw in enumerate(data.split(b"\n")):
        if raw.strip():
            yield task.first_line + k, raw


def _run_task(
    task: _Task,
    policy: TrainPolicy,
    input_options: InputOptions,
    profile: Profile,
    compression: str,
    out_dir: str,
) -> dict[str, Any]:
    """Render one range and write its shard and rejects; return only counts."""
    started = time.perf_counter()
    numbered = list(_lines(task))
    batch = render_batch(
        [raw for _, raw in numbered],
        policy=policy,
        options=input_options,
        line_numbers=[n for n, _ in numbered],
        source=task.path,
    )
    shard = Path(out_dir) / f"part-{task.shard:05d}.parquet"
    write_parquet(batch_table(batch, profile, task.file_index), shard, compression)
    rejects = Path(out_dir) / f".rejects-{task.shard:05d}.jsonl"
    with rejects.open("w", encoding="utf-8") as handle:
        for problem, raw in batch.rejected:
            handle.write(json.dumps({**problem.to_dict(), "row": raw}, ensure_ascii=False) + "\n")
    return {
        "file": shard.name,
        "sha256": _sha256(shard),
        "stats": batch.stats.to_dict(),
        "seconds": time.perf_counter() - started,
        "max_rss_kib": _max_rss_kib(),
    }


def _finish(
    out: Path, tasks: Sequence[_Task], done: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    stats = Stats()
    shards = []
    with (out / "rejects.jsonl").open("w", encoding="utf-8") as merged:
        for task in tasks:
            result = done["shards"][str(task.shard)]
            stats.merge(Stats.from_dict(result["stats"]))
            shards.append(
                {
                    "file": result["file"],
                    "sha256": result["sha256"],
                    "input": task.file_index,
                    "first_line": task.first_line,
                    **{
                        k: result["stats"][k]
                        for k in ("rows", "samples", "tokens", "trained_tokens")
                    },
                }
            )
            part = out / f".rejects-{task.shard:05d}.jsonl"
            merged.write(part.read_text(encoding="utf-8"))
    pa = require_pyarrow()
    import harmonia

    enc = default_encoding()
    manifest = {
        "format": "harmonia-training/1",
        "versions": {
            "harmonia": harmonia.__version__,
            "pyarrow": pa.__version__,
            "python": ".".join(map(str, sys.version_info[:3])),
        },
        "encoding": enc.name,
        "vocabulary_sha256": vocabulary_sha256(),
        **config,
        "shards": shards,
        "stats": stats.to_dict(),
    }
    _write_json(out / "stats.json", stats.to_dict())
    _write_json(out / MANIFEST, manifest)
    for task in tasks:
        (out / f".rejects-{task.shard:05d}.jsonl").unlink(missing_ok=True)
    (out / PROGRESS_FILE).unlink(missing_ok=True)
    return manifest


def vocabulary_sha256() -> str:
    """sha256 over every token's bytes, in id order (specials included)."""
    table = default_encoding().tokenizer.token_bytes_table
    digest = hashlib.sha256(array("I", map(len, table)).tobytes())
    digest.update(b"".join(table))
    return digest.hexdigest()


def _resume_state(out: Path, config: dict[str, Any], resume: bool) -> dict[str, Any]:
    state_path = out / PROGRESS_FILE
    if resume and state_path.exists():
        state: dict[str, Any] = json.loads(state_path.read_text(encoding="utf-8"))
        if state.get("config") != config:
            raise InputError(
                f"{out} holds a build with another policy, options or inputs: "
                "build into a new directory, or delete it and build again"
            )
        # Keep only shards whose file is still there and unchanged.
        state["shards"] = {
            k: v
            for k, v in state["shards"].items()
            if (out / v["file"]).exists()
            and _sha256(out / v["file"]) == v["sha256"]
            and (out / f".rejects-{int(k):05d}.jsonl").exists()
        }
        return state
    if not resume and any(out.glob("part-*.parquet")):
        raise InputError(
            f"{out} already holds shards: pass resume=True (--resume) to continue that build, "
            "or choose an empty directory"
        )
    return {"config": config, "shards": {}}


def _input_options_dict(options: InputOptions) -> dict[str, Any]:
    data = asdict(options)
    if data["columns"] is not None:
        data["columns"] = dict(data["columns"])
    return data


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def _max_rss_kib() -> int:
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class _Progress:
    """One status line: redrawn on a terminal, a plain line per shard otherwise."""

    def __init__(self, stream: TextIO, mode: ProgressMode, total: int, skipped: int) -> None:
        self.stream = stream
        self.mode = mode
        self.tty = mode == "auto" and stream.isatty()
        self.total = total
        self.done = skipped
        self.skipped = skipped
        self.rows = self.tokens = self.rejects = 0
        self.started = time.perf_counter()

    def update(self, result: dict[str, Any]) -> None:
        stats = result["stats"]
        self.done += 1
        self.rows += stats["rows"]
        self.tokens += stats["tokens"]
        self.rejects += stats["rows_rejected"]
        if self.mode == "none":
            return
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        fresh = self.done - self.skipped
        left = self.total - self.done
        eta = elapsed / fresh * left if fresh else 0.0
        line = (
            f"shards {self.done}/{self.total}  rows {self.rows} ({self.rows / elapsed:,.0f}/s)  "
            f"tokens {self.tokens / elapsed:,.0f}/s  rejects {self.rejects}  ETA {eta:.0f}s"
        )
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
