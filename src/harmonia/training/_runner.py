"""``build``: JSONL files to Parquet shards, in worker processes, resumable.

The parent only plans and bookkeeps. It splits each input at every
``shard_rows``-th line (one streaming pass that also hashes the file), and each
shard into chunks of at most 512 lines, fewer in small inputs (about 64 chunks a
file, in multiples of 16 lines), so that every worker has work on any input and
a worker holds one chunk's rows at a time. A worker renders a chunk into an Arrow
file and its rejects and returns counts only (sending tokens back to a parent
costs more than rendering them); once a shard's chunks are done, a worker joins
them into the shard's Parquet file. Shards and chunks are numbered by input range,
never by worker, chunk sizes depend on the input alone, and the manifest holds
nothing that depends on the worker count or the clock, so ``workers=1`` and
``workers=2`` write the same bytes. After each finished shard the parent
records it (with its sha256) in ``.progress.json``; ``resume=True`` skips the
recorded shards whose files still match.

A ``.gz`` input is read through gzip, streamed: its ranges are offsets into the
decompressed text (the file's hash is of its bytes on disk). gzip cannot seek,
so each worker decompresses, and throws away, the text before its own range:
plain JSONL is faster for many shards of one big file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, Final, TextIO, cast

from harmonia import InputError
from harmonia._files import cannot_read, write_text
from harmonia._options import STDIN, ProgressMode

from ._arrow import Profile, batch_table, require_pyarrow, write_parquet
from ._batch import Stats, default_encoding, render_batch
from ._inputs import InputOptions
from ._policy import TrainPolicy, resolve_policy

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
        for name in ("workers", "shard_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"BuildOptions.{name} must be at least 1, got {value!r}")
        problem = compression_problem(self.compression)
        if problem is not None:
            raise InputError(f"BuildOptions.compression: {problem}")


#: The Parquet codecs pyarrow writes (``pyarrow.parquet.write_table``'s ``compression``).
PARQUET_CODECS: Final = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")


def compression_problem(name: str) -> str | None:
    """Why ``name`` is not a Parquet codec this pyarrow writes, or ``None``.

    Checked before a build starts: pyarrow would refuse it only when the first
    shard is sealed, after every chunk of it was rendered and written.
    """
    if name.lower() not in PARQUET_CODECS:
        return f"{name!r} is not a Parquet codec: choose one of {', '.join(PARQUET_CODECS)}"
    try:
        import pyarrow as pa
    except ImportError:
        return None  # build() says pyarrow is missing, with the install command
    if name.lower() != "none" and not pa.Codec.is_available(name.lower()):
        return f"this pyarrow was built without {name!r}; choose another codec"
    return None


def check_inputs(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Refuse an input that is not a readable file, in the one wording of every command
    (``-``, standard input, is the caller's to read)."""
    for path in paths:
        if str(path) == STDIN:
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise cannot_read(path, exc) from None
        if Path(path).is_dir():  # where opening a folder is no error
            raise InputError(f"cannot read {path}: it is a folder; give a file")


def missing_manifest(build_dir: Path) -> InputError:
    """A folder without a manifest: an interrupted build says how to finish it."""
    if not build_dir.exists():
        return InputError(f"cannot read {build_dir}: No such file or directory")
    if not build_dir.is_dir():
        return InputError(
            f"{build_dir} is a file, not a build: give the directory 'harmonia data build' wrote"
        )
    if (build_dir / PROGRESS_FILE).exists():
        return InputError(
            f"{build_dir} is an interrupted build (no {MANIFEST} yet): the same "
            "'harmonia data build' command with --resume finishes it"
        )
    return InputError(f"{build_dir} has no {MANIFEST}: give the directory of a finished build")


_GRAIN: Final = 16  # chunks are multiples of this many lines
_MAX_CHUNK: Final = 512  # lines a worker renders at once, at most
_CHUNKS_PER_FILE: Final = 64  # what a small input is split into, about


@dataclass(frozen=True)
class _Chunk:
    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class _Task:
    shard: int
    file_index: int
    path: str
    first_line: int
    chunks: tuple[_Chunk, ...]


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
    files = [Path(p) for p in inputs]
    check_inputs(files)  # before the output folder exists: a refused input leaves none
    tasks, described = _plan(files, options.shard_rows)
    out.mkdir(parents=True, exist_ok=True)
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

    args = (policy, input_options, options.profile, str(out))
    if options.workers == 1 or sum(len(t.chunks) for t in todo) <= 1:
        for task in todo:
            results = [_run_chunk(task, j, *args) for j in range(len(task.chunks))]
            sealed = _seal(task.shard, len(task.chunks), options.compression, str(out))
            record(task.shard, _shard_result(sealed, results))
    else:
        _run_pool(todo, args, options.compression, options.workers, record)
    report.finish()
    return _finish(out, tasks, done, config)


def _run_pool(
    todo: Sequence[_Task],
    args: tuple[Any, ...],
    compression: str,
    workers: int,
    record: Callable[[int, dict[str, Any]], None],
) -> None:
    """Chunks in input order, each shard joined as soon as its chunks are done."""
    import functools
    import multiprocessing
    import signal
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # Loaded before the fork, so children share them: the encoding, and pyarrow's
    # first array (which imports pandas when it is installed, about a second).
    default_encoding()
    require_pyarrow().array([0])
    by_shard = {task.shard: task for task in todo}
    chunks: dict[int, list[dict[str, Any] | None]] = {
        task.shard: [None] * len(task.chunks) for task in todo
    }
    context = multiprocessing.get_context(method)
    # Workers leave Ctrl-C to the parent, which stops them (no traceback per worker).
    ignore_sigint = functools.partial(signal.signal, signal.SIGINT, signal.SIG_IGN)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=ignore_sigint)
    try:
        pending: dict[Future[dict[str, Any]], tuple[int, int]] = {}  # -> (shard, chunk or -1)
        queue = [(task.shard, j) for task in todo for j in range(len(task.chunks))]
        seals: list[int] = []
        while queue or seals or pending:
            while (seals or queue) and len(pending) < workers * 2:
                if seals:  # a finished shard first: its chunk files go
                    shard = seals.pop(0)
                    n = len(by_shard[shard].chunks)
                    pending[pool.submit(_seal, shard, n, compression, args[-1])] = (shard, -1)
                    continue
                shard, j = queue.pop(0)
                pending[pool.submit(_run_chunk, by_shard[shard], j, *args)] = (shard, j)
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                shard, j = pending.pop(future)
                if j < 0:
                    parts = [r for r in chunks.pop(shard) if r is not None]
                    record(shard, _shard_result(future.result(), parts))
                    continue
                chunks[shard][j] = future.result()
                if all(r is not None for r in chunks[shard]):
                    seals.append(shard)
    except BaseException:
        # Ctrl-C or a failed shard: stop the workers now rather than let them finish
        # their shards (the finished ones are recorded; --resume redoes the rest).
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
        raise
    pool.shutdown()


def _plan(files: Sequence[Path], shard_rows: int) -> tuple[list[_Task], list[dict[str, Any]]]:
    """Cut every file at each ``shard_rows``-th line, hashing it in the same pass."""
    tasks: list[_Task] = []
    described: list[dict[str, Any]] = []
    for index, path in enumerate(files):
        digest = hashlib.sha256()
        starts = [0]
        # Offsets after every _GRAIN-th line of a shard; grain_base[k]: shard k's first.
        grains = array("q")
        grain_base = [0]
        lines = line_end = position = 0
        with path.open("rb") as raw, named_input(path):
            # The hash is of the bytes on disk; lines are counted in the text.
            hashed = _Hashing(raw, digest)
            handle: Any = hashed
            if is_gzip(path):
                handle = _gzip().GzipFile(fileobj=cast(BinaryIO, hashed), mode="rb")
            while chunk := handle.read(_READ_CHUNK):
                at = chunk.find(b"\n")
                while at >= 0:
                    lines += 1
                    in_shard = lines % shard_rows
                    if in_shard == 0:
                        starts.append(position + at + 1)
                        grain_base.append(len(grains))
                    elif in_shard % _GRAIN == 0:
                        grains.append(position + at + 1)
                    line_end = position + at + 1
                    at = chunk.find(b"\n", at + 1)
                position += len(chunk)
            while hashed.read(_READ_CHUNK):
                pass  # whatever gzip left unread still belongs to the file's hash
        if starts[-1] >= position and len(starts) > 1:
            starts.pop()
            grain_base.pop()
        bounds = [*starts, position]
        step = _chunk_rows(lines + (position > line_end)) // _GRAIN  # a last line without \n
        grain_base.append(len(grains))
        for k in range(len(starts)):
            first_line = k * shard_rows + 1
            own = grains[grain_base[k] : grain_base[k + 1]]
            cuts = [bounds[k], *own[step - 1 :: step], bounds[k + 1]]
            pieces = tuple(
                _Chunk(cuts[j], cuts[j + 1], first_line + j * step * _GRAIN)
                for j in range(len(cuts) - 1)
                if cuts[j] < cuts[j + 1] or j == 0
            )
            tasks.append(_Task(len(tasks), index, str(path), first_line, pieces))
        described.append({"path": str(path), "bytes": position, "sha256": digest.hexdigest()})
    return tasks, described


def _chunk_rows(lines: int) -> int:
    """Lines per chunk for a file of ``lines`` lines: about _CHUNKS_PER_FILE chunks,
    in multiples of _GRAIN lines, at most _MAX_CHUNK (the input alone decides)."""
    per_chunk = -(-lines // _CHUNKS_PER_FILE)
    return min(_MAX_CHUNK, max(_GRAIN, -(-per_chunk // _GRAIN) * _GRAIN))


def is_gzip(path: Path | str) -> bool:
    """Inputs named ``*.gz`` are gzip-compressed."""
    return str(path).endswith(".gz")


def _gzip() -> ModuleType:
    """gzip, imported only when an input is compressed (``import harmonia.training``
    stays light)."""
    import gzip

    return gzip


@contextlib.contextmanager
def named_input(path: Path | str) -> Iterator[None]:
    """A corrupt ``.gz`` (or an unreadable file) as an InputError that names the file."""
    import zlib

    try:
        yield
    except (EOFError, zlib.error, OSError) as exc:
        # An OSError without errno from a .gz input is gzip.BadGzipFile.
        if isinstance(exc, OSError) and not (is_gzip(path) and exc.errno is None):
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        raise InputError(
            f"{path} is not a valid gzip file ({exc}); give JSONL or JSONL.gz"
        ) from None


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


def _lines(path: str, chunk: _Chunk) -> Iterator[tuple[int, bytes]]:
    """The range's non-blank lines, as bytes: ``render_batch`` decodes each one and
    rejects a line that is not UTF-8 (E104)."""
    with open_input(path) as handle:
        handle.seek(chunk.start)  # gzip: decompresses up to the range (see the module doc)
        data = handle.read(chunk.end - chunk.start)
    for k, raw in enumerate(data.split(b"\n")):
        if raw.strip():
            yield chunk.first_line + k, raw


def _chunk_name(shard: int, j: int) -> str:
    return f".chunk-{shard:05d}-{j:05d}"


def _run_chunk(
    task: _Task, j: int, policy: TrainPolicy, options: InputOptions, profile: Profile, out_dir: str
) -> dict[str, Any]:
    """Render chunk ``j`` of a shard into an Arrow file and its rejects; return counts."""
    started = time.perf_counter()
    lines = list(_lines(task.path, task.chunks[j]))
    rows, numbers = [raw for _, raw in lines], [n for n, _ in lines]
    batch = render_batch(
        rows, policy=policy, options=options, line_numbers=numbers, source=task.path
    )
    base = Path(out_dir) / _chunk_name(task.shard, j)
    table = batch_table(batch, profile, task.file_index)
    pa = require_pyarrow()
    with pa.OSFile(str(base) + ".arrow", "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with open(str(base) + ".rejects", "w", encoding="utf-8") as handle:
        for problem, raw in batch.rejected:
            handle.write(json.dumps({**problem.to_dict(), "row": raw}, ensure_ascii=False) + "\n")
    return {
        "stats": batch.stats.to_dict(),
        "seconds": time.perf_counter() - started,
        "max_rss_kib": _max_rss_kib(),
    }


def _seal(shard: int, n_chunks: int, compression: str, out_dir: str) -> dict[str, Any]:
    """Join a shard's chunks into its Parquet file and rejects; remove the chunks."""
    pa = require_pyarrow()
    out = Path(out_dir)
    bases = [out / _chunk_name(shard, j) for j in range(n_chunks)]
    # Memory-mapped, so the shard's rows are never all in memory; the chunks are
    # sized by the input alone, so the Parquet bytes do not depend on the workers.
    tables = [pa.ipc.open_file(pa.memory_map(str(b) + ".arrow")).read_all() for b in bases]
    path = out / f"part-{shard:05d}.parquet"
    write_parquet(pa.concat_tables(tables), path, compression)
    del tables
    with (out / f".rejects-{shard:05d}.jsonl").open("w", encoding="utf-8") as merged:
        for base in bases:
            merged.write(Path(str(base) + ".rejects").read_text(encoding="utf-8"))
    for base in bases:
        Path(str(base) + ".arrow").unlink()
        Path(str(base) + ".rejects").unlink()
    return {"file": path.name, "sha256": _sha256(path), "max_rss_kib": _max_rss_kib()}


def _shard_result(sealed: dict[str, Any], chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    stats = Stats()
    for chunk in chunks:
        stats.merge(Stats.from_dict(chunk["stats"]))
    return {
        "file": sealed["file"],
        "sha256": sealed["sha256"],
        "stats": stats.to_dict(),
        "seconds": sum(c["seconds"] for c in chunks),
        "max_rss_kib": max([sealed["max_rss_kib"], *(c["max_rss_kib"] for c in chunks)]),
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
            where = {"input": task.file_index, "first_line": task.first_line}
            counts = {
                k: result["stats"][k] for k in ("rows", "samples", "tokens", "trained_tokens")
            }
            shards.append({"file": result["file"], "sha256": result["sha256"], **where, **counts})
            part = out / f".rejects-{task.shard:05d}.jsonl"
            merged.write(part.read_text(encoding="utf-8"))
    pa = require_pyarrow()
    import harmonia

    manifest = {
        "format": "harmonia-training/1",
        "versions": {
            "harmonia": harmonia.__version__,
            "pyarrow": pa.__version__,
            "python": ".".join(map(str, sys.version_info[:3])),
        },
        "encoding": default_encoding().name,
        "vocabulary_sha256": vocabulary_sha256(),
        **config,
        "shards": shards,
        "stats": stats.to_dict(),
    }
    _write_json(out / "stats.json", stats.to_dict())
    _write_json(out / MANIFEST, manifest)
    for task in tasks:
        (out / f".rejects-{task.shard:05d}.jsonl").unlink(missing_ok=True)
    for leftover in out.glob(".chunk-*"):  # of shards an interrupted build left unsealed
        leftover.unlink()
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
    write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")  # whole or not at all


def _max_rss_kib() -> int:
    try:
        import resource
    except ImportError:  # not on Windows
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class _Progress:
    """One status line: redrawn on a terminal, a plain line per shard otherwise."""

    def __init__(self, stream: TextIO, mode: ProgressMode, total: int, skipped: int) -> None:
        self.stream, self.mode, self.total = stream, mode, total
        self.tty = mode == "auto" and stream.isatty()
        self.done = self.skipped = skipped
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
        eta = elapsed / fresh * (self.total - self.done) if fresh else 0.0
        line = (
            f"shards {self.done}/{self.total}  rows {self.rows} ({self.rows / elapsed:,.0f}/s)  "
            f"tokens {self.tokens / elapsed:,.0f}/s  rejects {self.rejects}  ETA {eta:.0f}s"
        )
        self.stream.write("\r" + line if self.tty else line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
