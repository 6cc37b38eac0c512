"""``harmonia data``: validate, build, stats, inspect, pack, export.

Wired into the ``harmonia`` command with :func:`add_subcommand`; :func:`main`
runs it on its own (``main(["build", "in.jsonl", "-o", "out/"])``). Exit status:
0 ok, 1 an error or more rejected rows than ``--max-reject-rate`` allows.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from harmonia import InputError
from harmonia._files import (
    atomic_file,
    atomic_folder,
    check_output_file,
    refuse_existing,
    refuse_same,
    write_text,
)
from harmonia._options import (
    COLOR,
    PROGRESS,
    STDIN,
    Commands,
    Option,
    add_flags,
    add_options,
    cot_policy,
    flag,
    force,
    from_args,
    progress_on_terminal,
    run_command,
    use_color,
)

from ._arrow import PROFILES
from ._batch import Stats, default_encoding, render_batch
from ._hf_template import render_hf, render_hf_for_training
from ._inputs import InputOptions, convert_row, is_date, row_date
from ._pack import export_memmap, pack
from ._policy import FINAL_ENDS, OVERFLOWS, PRESETS, TURNS_MODES, TrainPolicy
from ._runner import (
    MANIFEST,
    BuildOptions,
    build,
    check_inputs,
    compression_problem,
    missing_manifest,
    named_input,
    open_input,
)
from ._sample import render_for_training
from ._view import html_view, terminal_view

_CHUNK = 1000  # rows per render_batch call in validate and stats


_EXAMPLES = """examples:
  harmonia data validate chats.jsonl --rejects rejects.jsonl
  harmonia data build chats.jsonl -o out/ --policy harmony --workers 2
  harmonia data inspect chats.jsonl --row 3 --html row3.html
  harmonia data pack out/ -o packed/ --seq-len 8192

exit status: 0 success; 1 an input was refused, nothing was written, or more rows
were rejected than --max-reject-rate allows; 2 a usage error; 130 interrupted (Ctrl-C)"""

#: The epilog of the commands without --max-reject-rate (stats, inspect, pack, export).
_EXAMPLES_NO_REJECTS = (
    _EXAMPLES.split("exit status:")[0]
    + """exit status: 0 success; 1 an input was refused or nothing was written; 2 a usage
error; 130 interrupted (Ctrl-C)"""
)


def add_subcommand(commands: Commands) -> argparse.ArgumentParser:
    """Add ``data`` and its commands to a command's :class:`~harmonia._options.Commands`."""
    data = commands.add(
        "data",
        "training data: validate, build, stats, inspect, pack, export",
        description="Training data for gpt-oss: token ids and loss masks (docs/training.md).",
        epilog=_EXAMPLES,
    )
    sub = commands.nested(data, "data_command", "what to do")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        rejects = name in ("validate", "build")  # the commands with --max-reject-rate
        return sub.add(name, help, epilog=_EXAMPLES if rejects else _EXAMPLES_NO_REJECTS)

    validate = command("validate", "check input rows; report problems by code")
    _inputs(validate)
    add_flags(
        validate,
        flag("--rejects", "write rejected rows (JSONL) here", metavar="FILE"),
        flag("--report", "write the statistics (JSON) here", metavar="FILE"),
        force("the --rejects and --report files"),
        *_REJECT_RATE,
    )
    validate.set_defaults(func=_validate)

    build_cmd = command("build", "render inputs to Parquet shards with loss masks")
    _inputs(build_cmd)
    add_flags(
        build_cmd,
        _output("DIR", "the build directory to write"),
        flag(
            "--columns",
            "column profile: canonical (input_ids, loss_mask), trl, hf (labels with -100)",
            choices=PROFILES,
            default="canonical",
            dest="profile",
        ),
        flag("--workers", "worker processes", type=int, default=1),
        flag("--shard-rows", "input rows per shard", type=int, default=BuildOptions.shard_rows),
        flag("--compression", "Parquet compression codec", default=BuildOptions.compression),
        flag("--resume", "continue an interrupted build", action="store_true"),
        force("the build directory"),
        PROGRESS,
        *_REJECT_RATE,
    )
    build_cmd.set_defaults(
        func=_build, on_interrupt="the same command with --resume continues the build"
    )

    stats = command("stats", "statistics of a build directory or of inputs")
    add_flags(
        stats,
        flag("paths", "a build directory or input files", nargs="+", metavar="OUT/|IN.jsonl"),
        flag("--json", "print JSON", action="store_true"),
    )
    _row_options(stats)
    stats.set_defaults(func=_stats)

    pack_cmd = command("pack", "pack a build's samples into rows of --seq-len tokens")
    add_flags(
        pack_cmd,
        _BUILD,
        _output("PACKED/", "the directory to write"),
        flag("--seq-len", "tokens per packed row", type=int, required=True),
        force("the output directory"),
    )
    pack_cmd.set_defaults(func=_pack)

    export = command("export", "a build as flat memory-mapped files")
    add_flags(
        export,
        _BUILD,
        _output("DIR", "where to write"),
        flag("--to", "memmap: uint32 ids, uint8 mask", choices=("memmap",), default="memmap"),
        force("the output directory"),
    )
    export.set_defaults(func=_export)

    inspect = command("inspect", "one row's tokens: context and trained, and why")
    add_flags(
        inspect,
        flag("input", "the input file; - for standard input", metavar="IN.jsonl"),
        flag("--row", "the line number (from 1)", type=int, required=True),
        flag("--html", "also write an HTML page", metavar="OUT.html"),
        COLOR,
        force("the --html page"),
    )
    _row_options(inspect)
    inspect.set_defaults(func=_inspect)
    return data


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run ``harmonia data`` with ``argv`` (without the leading ``data``)."""
    parser = argparse.ArgumentParser(prog="harmonia")
    add_subcommand(Commands(parser))
    try:
        args = parser.parse_args(["data", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:
        return int(exc.code or 0)
    out = stdout if stdout is not None else sys.stdout
    return run_command(args, out, f"harmonia data {args.data_command}")


# -- arguments --------------------------------------------------------------------


def _output(metavar: str, help: str) -> Option:
    return flag("--output", help, short="-o", required=True, metavar=metavar)


#: The build directory pack and export read.
_BUILD = flag("build", "a build directory", metavar="OUT/")


def _row_options(parser: argparse.ArgumentParser) -> None:
    """How rows are read (``InputOptions``) and trained (``TrainPolicy``)."""
    add_options(parser, InputOptions)
    add_flags(
        parser,
        flag(
            "--policy",
            "the preset the options below change (docs/training.md compares them)",
            choices=tuple(PRESETS),
            default="harmony",
        ),
        flag("--turns", "which turns train", choices=TURNS_MODES),
        cot_policy(
            default=None,
            help="which earlier reasoning a sample keeps (render's and serve's --cot-policy; "
            "hf is the gpt-oss chat template's rule); default: the preset's",
        ),
        flag("--channels", "trained channels, comma-separated"),
        flag("--final-end", "how the last final answer ends", choices=FINAL_ENDS),
        flag("--max-length", "tokens per sample", type=int),
        flag("--overflow", "what to do past --max-length", choices=OVERFLOWS),
        flag(
            "--full-sequence",
            "train every token (system, developer, user and tool messages too)",
            action="store_true",
            default=None,
        ),
    )


def _inputs(parser: argparse.ArgumentParser) -> None:
    add_flags(
        parser,
        flag("inputs", "JSONL input files; - for standard input", nargs="+", metavar="IN.jsonl"),
    )
    _row_options(parser)


_REJECT_RATE = (
    flag(
        "--max-reject-rate",
        "exit 1 when more than this fraction of rows is rejected (default 0)",
        type=float,
        default=0.0,
    ),
    flag(
        "--strict",
        "exit 1 when any row is rejected, whatever --max-reject-rate allows",
        action="store_true",
    ),
)


def _policy_of(args: argparse.Namespace) -> TrainPolicy:
    changes: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("turns", "final_end", "max_length", "overflow", "full_sequence")
        if getattr(args, k) is not None
    }
    if args.cot_policy is not None:
        changes["cot"] = args.cot_policy
    if args.channels is not None:
        changes["channels"] = tuple(c.strip() for c in args.channels.split(",") if c.strip())
    return PRESETS[args.policy].with_(**changes)


#: The longest packed row ``--seq-len`` may ask for: token offsets are 64-bit, but a
#: row longer than any model's context is a typo (``99999999999999999999``).
MAX_SEQ_LEN = 1 << 24


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse, before any work, flags that are out of range or contradict each other."""
    date = getattr(args, "date", None)
    if date is not None and date != "from-row" and not is_date(date):
        raise InputError(f"--date {date!r} is not a date: give YYYY-MM-DD (a real day) or from-row")
    fmt = getattr(args, "input_format", None)
    if getattr(args, "map", None) and fmt != "columns":
        raise InputError(
            f"--map names the columns of --input-format columns, not of --input-format {fmt}: "
            "add --input-format columns, or leave --map out"
        )
    rate = getattr(args, "max_reject_rate", None)
    if rate is not None and not 0.0 <= rate <= 1.0:
        raise InputError(
            f"--max-reject-rate {rate:g} is not a fraction: give a number from 0 to 1 "
            "(0.05 allows 5% of rows rejected)"
        )
    for name in ("workers", "shard_rows", "max_length", "row"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    seq_len = getattr(args, "seq_len", None)
    if seq_len is not None and not 1 <= seq_len <= MAX_SEQ_LEN:
        raise InputError(f"--seq-len must be from 1 to {MAX_SEQ_LEN:,} tokens, got {seq_len}")
    if getattr(args, "resume", False) and getattr(args, "force", False):
        raise InputError("--resume continues a build and --force replaces it: give one of them")
    compression = getattr(args, "compression", None)
    if compression is not None:
        problem = compression_problem(compression)
        if problem is not None:
            raise InputError(f"--compression {problem}")


# -- commands ---------------------------------------------------------------------


def _numbered(path: Path) -> Iterator[tuple[int, bytes]]:
    """An input's lines as bytes, numbered from 1, as ``build`` reads them (a line
    that is not UTF-8 is an E104 of that line alone)."""
    with named_input(path), open_input(path) as handle:
        yield from enumerate(handle, 1)


def _chunks(path: Path) -> Iterator[tuple[list[int], list[bytes]]]:
    """The non-blank lines in chunks of :data:`_CHUNK`: (line numbers, lines)."""
    lines = ((n, line) for n, line in _numbered(path) if line.strip())
    while chunk := list(itertools.islice(lines, _CHUNK)):
        yield [n for n, _ in chunk], [line for _, line in chunk]


@contextlib.contextmanager
def _stdin_spooled(paths: Sequence[str]) -> Iterator[list[str]]:
    """``paths`` with ``-`` (standard input) replaced by a temporary copy of it.

    The commands read an input more than once (build plans, then renders each
    range), so standard input is copied to a file first.
    """
    if STDIN not in paths:
        yield list(paths)
        return
    if list(paths).count(STDIN) > 1:
        raise InputError("give - (standard input) once")
    with tempfile.TemporaryDirectory(prefix="harmonia-stdin-") as folder:
        copy = Path(folder) / "stdin.jsonl"
        with copy.open("wb") as handle:
            shutil.copyfileobj(sys.stdin.buffer, handle)
        yield [str(copy) if p == STDIN else p for p in paths]


def _scan(args: argparse.Namespace, paths: Sequence[str], out: TextIO) -> Stats:
    """Render every row without writing; problems go to ``out`` and ``--rejects``."""
    policy, options = _policy_of(args), from_args(InputOptions, args)
    stats = Stats()
    rejects_path = getattr(args, "rejects", None)
    report_path = getattr(args, "report", None)
    refuse_same(
        {"--rejects": rejects_path, "--report": report_path}, {f"the input {p}": p for p in paths}
    )
    for written in (rejects_path, report_path):
        if written:
            check_output_file(written, args.force)
    check_inputs(paths)  # every input before the first row: the outputs are not begun
    with contextlib.ExitStack() as stack:
        rejects = stack.enter_context(atomic_file(rejects_path)) if rejects_path else None
        with _stdin_spooled(paths) as files:
            for name, file in zip(paths, files, strict=True):
                source = "<stdin>" if name == STDIN else name
                for numbers, rows in _chunks(Path(file)):
                    batch = render_batch(
                        rows, policy=policy, options=options, line_numbers=numbers, source=source
                    )
                    stats.merge(batch.stats)
                    for problem in batch.problems:
                        out.write(
                            f"{problem.source}:{problem.line}: {problem.code} {problem.name} "
                            f"({problem.severity}): {problem.message}\n"
                        )
                    for problem, raw in batch.rejected:
                        if rejects is not None:
                            record = {**problem.to_dict(), "row": raw.rstrip("\r\n")}
                            rejects.write(json.dumps(record, ensure_ascii=False) + "\n")
        _no_rows(stats.to_dict(), paths)  # inside: no rows, no --rejects file either
    return stats


def _too_many_rejects(stats: dict[str, Any], limit: float, out: TextIO, strict: bool) -> int:
    if not stats["rows_ok"]:
        rejected, rows = stats["rows_rejected"], stats["rows"]
        out.write(f"no row is left to train: {rejected} rejected of {rows}\n")
        return 1
    if strict and stats["rows_rejected"]:
        out.write(f"rejected {stats['rows_rejected']} row(s), and --strict allows none\n")
        return 1
    rate = stats["rows_rejected"] / stats["rows"] if stats["rows"] else 0.0
    if rate > limit:
        out.write(f"rejected {rate:.2%} of rows, more than --max-reject-rate {limit:.2%}\n")
        return 1
    return 0


#: The counters that _print_stats lists, and the words before each name.
_COUNTED = {"problems": "", "refused_fields": "refused ", "trained_by_channel": "trained "}


def _print_stats(stats: dict[str, Any], out: TextIO) -> None:
    for key in ("rows", "rows_ok", "rows_rejected", "samples", "tokens", "trained_tokens"):
        out.write(f"{key:>15}: {stats[key]}\n")
    out.write(f"{'trained':>15}: {stats['trained_fraction']:.2%}\n")
    for key, prefix in _COUNTED.items():
        for name, count in stats.get(key, {}).items():
            out.write(f"{prefix + name:>15}: {count}\n")
    if stats.get("lengths"):
        buckets = ", ".join(f"<={k}: {v}" for k, v in stats["lengths"].items())
        out.write(f"{'lengths':>15}: {buckets}\n")
    if stats["formats"]:
        chosen = ", ".join(f"{k} ({v})" for k, v in stats["formats"].items())
        out.write(f"{'formats':>15}: {chosen}\n")


def _no_rows(stats: dict[str, Any], inputs: Sequence[str]) -> None:
    """An input without a row is an error: a command that reads nothing writes nothing."""
    if not stats["rows"]:
        names = ", ".join("standard input" if p == STDIN else p for p in inputs)
        raise InputError(f"no rows in {names}: nothing to do (give JSONL, one row per line)")


def _validate(args: argparse.Namespace, out: TextIO) -> int:
    _check_flags(args)
    stats = _scan(args, args.inputs, out).to_dict()
    _print_stats(stats, out)
    if args.report:
        write_text(args.report, json.dumps(stats, indent=1) + "\n")
    return _too_many_rejects(stats, args.max_reject_rate, out, args.strict)


#: Files only harmonia's own outputs hold: a folder with one of them (or an empty
#: one) is what --force may replace; any other folder is refused.
_OUR_FILES = (MANIFEST, ".progress.json", "pack.json", "tokens.u32")


def _empty_folder(folder: Path) -> bool:
    """An empty folder is as good as none: no output refuses it, none needs --force."""
    return folder.is_dir() and not any(folder.iterdir())


def _refuse_output_folder(path: str, force: bool, *, also: str = "") -> None:
    folder = Path(path)
    if _empty_folder(folder):
        return
    refuse_existing(folder, force, also=also)
    if folder.exists() and (
        not folder.is_dir() or not any((folder / name).exists() for name in _OUR_FILES)
    ):
        raise InputError(
            f"{folder} is not a folder harmonia wrote: --force replaces only harmonia's "
            "outputs; choose another name"
        )


def _build(args: argparse.Namespace, out: TextIO) -> int:
    _check_flags(args)
    refuse_same({"-o": args.output}, {f"the input {p}": p for p in args.inputs})
    check_inputs(args.inputs)
    if not args.resume:
        _refuse_output_folder(args.output, args.force, also="--resume continues it")
    output = Path(args.output)
    fresh = not output.exists() or _empty_folder(output)
    # The command line's auto: a redrawn line on a terminal, quiet in a log.
    quiet = progress_on_terminal(args.progress, sys.stderr) is None
    options = replace(from_args(BuildOptions, args), progress="none" if quiet else args.progress)
    if args.force and not args.resume and not fresh:
        shutil.rmtree(output)
        fresh = True
    existed = output.exists()
    try:
        with _stdin_spooled(args.inputs) as inputs:
            manifest = build(
                inputs,
                args.output,
                policy=_policy_of(args),
                input_options=from_args(InputOptions, args),
                options=options,
            )
    except Exception:
        # A refused input leaves no folder it made (Ctrl-C keeps it, for --resume).
        if not existed:
            shutil.rmtree(output, ignore_errors=True)
        raise
    if not manifest["stats"]["rows_ok"] and fresh:
        # Nothing to train is not a build (data validate --rejects lists why).
        shutil.rmtree(output, ignore_errors=True)
    _no_rows(manifest["stats"], args.inputs)
    _print_stats(manifest["stats"], out)
    out.write(
        f"wrote {len(manifest['shards'])} shard(s), {MANIFEST} and rejects.jsonl to {args.output}\n"
    )
    return _too_many_rejects(manifest["stats"], args.max_reject_rate, out, args.strict)


def _stats(args: argparse.Namespace, out: TextIO) -> int:
    _check_flags(args)
    first = Path(args.paths[0])
    if first.is_dir():
        if len(args.paths) > 1:
            raise InputError("give one build directory, or input files")
        if not (first / MANIFEST).is_file():
            raise missing_manifest(first)
        stats = json.loads((first / MANIFEST).read_text(encoding="utf-8"))["stats"]
        # Length buckets in order of length (the manifest's JSON sorts them as strings).
        lengths = stats.get("lengths", {})
        stats["lengths"] = {k: lengths[k] for k in sorted(lengths, key=int)}
    else:
        stats = _scan(args, args.paths, io.StringIO()).to_dict()
    if args.json:
        out.write(json.dumps(stats, indent=1) + "\n")
    else:
        _print_stats(stats, out)
    return 0


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    _check_flags(args)
    if args.html:
        refuse_same({"--html": args.html}, {"the input": args.input})
        check_output_file(args.html, args.force)
    check_inputs([args.input])
    with _stdin_spooled([args.input]) as [path]:
        line = _line(Path(path), args.row, args.input)
    name = "<stdin>" if args.input == STDIN else args.input
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:  # as validate and rejects.jsonl say it
        raise InputError(
            f"{name}:{args.row}: E101 not JSON: {exc.msg} at column {exc.colno}"
        ) from None
    options = from_args(InputOptions, args)
    enc = default_encoding()
    if options.dialect == "hf":
        date = row_date(row, options) or ""
        messages = render_hf(row, enc, date=date, reasoning_effort=options.reasoning_effort)[2]
        samples = render_hf_for_training(
            row, enc, _policy_of(args), date=date, reasoning_effort=options.reasoning_effort
        )
        chosen = "hf dialect"
    else:
        converted = convert_row(row, options)
        messages = converted.conversation.messages
        samples = render_for_training(messages, enc, _policy_of(args), weights=converted.weights)
        chosen = f"format {converted.format}"
    out.write(f"{name}:{args.row}: {chosen}, policy {args.policy}\n")
    out.write(terminal_view(enc, samples, messages, use_color(out, args.color)))
    if args.html:
        write_text(args.html, html_view(enc, samples, messages, f"{name}:{args.row}"))
    return 0


def _pack(args: argparse.Namespace, out: TextIO) -> int:
    _check_flags(args)
    refuse_same({"-o": args.output}, {"the build": args.build})
    _refuse_output_folder(args.output, args.force)
    with atomic_folder(args.output) as folder:  # appears whole, or not at all
        summary = pack(args.build, folder, args.seq_len)
        if not summary["rows"]:
            raise InputError(
                f"nothing written: all {summary['too_long']} samples are longer than "
                f"--seq-len {args.seq_len}; give a larger --seq-len"
            )
    out.write(
        f"packed {summary['samples']} samples into {summary['rows']} rows of {args.seq_len} "
        f"tokens ({summary['efficiency']:.1%} filled, {summary['too_long']} too long, left out)\n"
    )
    return 0


def _export(args: argparse.Namespace, out: TextIO) -> int:
    refuse_same({"-o": args.output}, {"the build": args.build})
    _refuse_output_folder(args.output, args.force)
    with atomic_folder(args.output) as folder:
        count = export_memmap(args.build, folder)
        if not count:
            raise InputError(f"nothing written: {args.build} holds no samples")
    out.write(f"wrote {count} samples to {args.output} (tokens.u32, mask.u8, offsets.i64)\n")
    return 0


def _line(path: Path, number: int, name: str) -> str:
    shown = "standard input" if name == STDIN else name
    for n, line in _numbered(path):
        if n == number:
            try:
                return line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{shown}:{number}: E104 not UTF-8 at byte {exc.start}") from None
    raise InputError(f"{shown} has no line {number}")
