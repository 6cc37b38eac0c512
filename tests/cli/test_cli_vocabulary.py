"""One vocabulary across the subcommands, run as the real ``harmonia`` executable.

Ctrl-C ends every command with one line and exit status 130; an output appears
whole or not at all; an existing output needs ``--force``; "nothing written" is
an error; a missing input exits 1; ``-`` reads standard input; ``--progress``
and ``--cot-policy`` mean the same everywhere (docs/cli.md has the table).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import all_parsers

from harmonia._options import PROGRESS_MODES
from harmonia.vocabulary import COT_POLICY_NAMES

SRC = Path(__file__).resolve().parents[2] / "src"
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"Hi {n}"},
            {"role": "assistant", "content": "Hello"},
        ]
    }
    for n in range(40)
]


def harmonia(
    *argv: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "harmonia", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,  # a hang guard, not a speed limit
    )


def spawn(*argv: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-m", "harmonia", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def wait_for(condition: object, what: str, timeout: float = 120) -> None:
    """Poll until ``condition()`` holds (a hang guard, not a speed threshold)."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def jsonl(path: Path, rows: list[dict[str, object]] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


# -- Ctrl-C --------------------------------------------------------------------------


def test_ctrl_c_during_inspect_html_leaves_no_page(tmp_path: Path) -> None:
    # The ids come through a pipe the test holds open: the page is being written
    # (its temporary file exists) and the command waits for more input when the
    # interrupt comes, whatever the machine's speed.
    page = tmp_path / "page.html"
    process = spawn("inspect", "-", "--ids", "--html", str(page), stdin=subprocess.PIPE)
    assert process.stdin is not None
    process.stdin.write(" ".join(["200006", "1428", "200008", "13225", "200007"] * 20_000))
    process.stdin.write(" ")
    process.stdin.flush()
    wait_for(lambda: leftovers(tmp_path), "the page was never started")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    assert one_line(err) == "harmonia inspect: interrupted"
    assert not page.exists() and leftovers(tmp_path) == []


BLOCKED_BUILD = """
import os, sys, time
from harmonia.training import _runner
from harmonia._cli.main import main

def blocked(task, *args):
    # A shard that never finishes: only stopping the worker ends it.
    open(os.path.join(sys.argv[1], f"worker-{os.getpid()}"), "w").close()
    time.sleep(3600)

_runner._run_chunk = blocked
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_during_data_build_stops_the_workers_and_mentions_resume(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    marks = tmp_path / "marks"
    marks.mkdir()
    rows = jsonl(tmp_path / "in.jsonl")
    argv = ["data", "build", str(rows), "-o", str(tmp_path / "out"), "--workers", "2"]
    process = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_BUILD, str(marks), *argv, "--shard-rows", "10"],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: len(list(marks.iterdir())) == 2, "the workers never started")
    process.send_signal(signal.SIGINT)
    # Without the fix the pool waits for its workers: an hour here.
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130
    line = one_line(err)
    assert line.startswith("harmonia data build: interrupted") and "--resume" in line
    for mark in marks.iterdir():
        pid = int(mark.name.split("-")[1])
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# -- outputs: whole, --force, nothing written ------------------------------------------


def test_an_existing_output_needs_force_everywhere(tmp_path: Path) -> None:
    ids = tmp_path / "c.txt"
    ids.write_text("<|channel|>final<|message|>Hi<|return|>", encoding="utf-8")
    page = tmp_path / "page.html"
    page.write_text("mine", encoding="utf-8")
    refused = harmonia("inspect", str(ids), "--html", str(page))
    assert refused.returncode == 1 and "--force replaces it" in one_line(refused.stderr)
    assert page.read_text(encoding="utf-8") == "mine"
    assert harmonia("inspect", str(ids), "--html", str(page), "--force").returncode == 0
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    rows = jsonl(tmp_path / "in.jsonl")
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    refused = harmonia("data", "validate", str(rows), "--report", str(report))
    assert refused.returncode == 1 and "--force" in refused.stderr
    done = harmonia("data", "validate", str(rows), "--report", str(report), "--force")
    assert done.returncode == 0 and json.loads(report.read_text())["rows"] == 40


def test_data_build_pack_and_export_refuse_and_replace_alike(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    rows = jsonl(tmp_path / "in.jsonl")
    out, packed, flat = tmp_path / "out", tmp_path / "packed", tmp_path / "flat"
    assert harmonia("data", "build", str(rows), "-o", str(out)).returncode == 0
    again = harmonia("data", "build", str(rows), "-o", str(out))
    line = one_line(again.stderr)
    assert again.returncode == 1 and "--resume continues it" in line and "--force" in line
    assert "resume=True" not in line
    assert harmonia("data", "build", str(rows), "-o", str(out), "--force").returncode == 0
    for command, target in (("pack", packed), ("export", flat)):
        extra = ["--seq-len", "4096"] if command == "pack" else []
        assert harmonia("data", command, str(out), "-o", str(target), *extra).returncode == 0
        again = harmonia("data", command, str(out), "-o", str(target), *extra)
        assert again.returncode == 1 and "--force replaces it" in again.stderr
        forced = harmonia("data", command, str(out), "-o", str(target), *extra, "--force")
        assert forced.returncode == 0, forced.stderr
        assert leftovers(tmp_path) == []
    # --force replaces only what harmonia wrote.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    refused = harmonia("data", "pack", str(out), "-o", str(mine), "--seq-len", "64", "--force")
    assert refused.returncode == 1 and "not a folder harmonia wrote" in refused.stderr
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_nothing_written_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    for argv in (
        ["data", "build", str(empty), "-o", str(tmp_path / "nothing")],
        ["data", "validate", str(empty)],
    ):
        result = harmonia(*argv)
        assert result.returncode == 1 and "no rows in" in one_line(result.stderr), argv
    assert not (tmp_path / "nothing").exists()
    out = tmp_path / "out"
    assert (
        harmonia("data", "build", str(jsonl(tmp_path / "in.jsonl")), "-o", str(out)).returncode == 0
    )
    short = harmonia("data", "pack", str(out), "-o", str(tmp_path / "packed"), "--seq-len", "3")
    assert short.returncode == 1
    assert "nothing written" in one_line(short.stderr) and "--seq-len" in short.stderr
    assert not (tmp_path / "packed").exists() and leftovers(tmp_path) == []


# -- inputs: missing files, standard input ----------------------------------------------


def test_a_missing_file_exits_1_in_every_command(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    for argv in (
        ["render", missing],
        ["schema", missing],
        ["parse", missing],
        ["inspect", missing],
        ["data", "validate", missing],
        ["data", "stats", missing],
        ["data", "inspect", missing, "--row", "1"],
        ["data", "build", missing, "-o", str(tmp_path / "o")],
        ["chat", "--engine", "scripted", "--script", missing, "--prompt", "hi"],
        ["chat", "--engine", "scripted", "--script", missing, "--load", missing],
    ):
        result = harmonia(*argv)
        assert result.returncode == 1, (argv, result.stderr)
        assert "missing.json" in one_line(result.stderr), argv


def test_dash_reads_standard_input_in_data_commands(tmp_path: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in ROWS[:3])
    validated = harmonia("data", "validate", "-", stdin=text)
    assert validated.returncode == 0 and "rows_ok: 3" in " ".join(validated.stdout.split())
    inspected = harmonia("data", "inspect", "-", "--row", "2", "--color", "never", stdin=text)
    assert inspected.returncode == 0 and inspected.stdout.startswith("<stdin>:2: format")
    assert "Hi 1" in inspected.stdout


# -- flags ----------------------------------------------------------------------------------


def test_the_shared_flags_mean_the_same_everywhere() -> None:
    seen: dict[str, set[str]] = {"--progress": set(), "--cot-policy": set(), "--force": set()}
    for words, parser in all_parsers().items():
        options = {s: a for a in parser._actions for s in a.option_strings}
        if "--progress" in options:
            seen["--progress"].add(words)
            assert tuple(options["--progress"].choices or ()) == PROGRESS_MODES, words
            assert options["--progress"].default == "auto", words
        if "--cot-policy" in options:
            seen["--cot-policy"].add(words)
            assert tuple(options["--cot-policy"].choices or ()) == COT_POLICY_NAMES, words
        for flag in ("--html", "--save", "--rejects", "--report"):
            if flag in options:
                assert "--force" in options, (words, flag)
        if "--force" in options:
            seen["--force"].add(words)
    assert {"inspect", "data build"} <= seen["--progress"]
    assert {"render", "chat", "serve", "data build", "data inspect"} <= seen["--cot-policy"]
    assert {"inspect", "data build", "data pack", "data export", "chat"} <= seen["--force"]


def test_old_spellings_are_usage_errors(tmp_path: Path) -> None:
    rows = jsonl(tmp_path / "in.jsonl", ROWS[:2])
    new = harmonia("data", "validate", str(rows), "--cot-policy", "keep_all")
    assert new.returncode == 0 and new.stderr == ""
    for old in (["--cot", "keep_all"], ["--cot-policy", "keep"], ["--format", "openai"]):
        refused = harmonia("data", "validate", str(rows), *old)
        assert refused.returncode == 2, old
    ids = tmp_path / "c.txt"
    ids.write_text("<|channel|>final<|message|>Hi<|return|>", encoding="utf-8")
    assert harmonia("inspect", str(ids), "--no-progress").returncode == 2


#: A flag whose values differ by command while its meaning does not: each command
#: reads its own kinds of input (render: a request or harmony JSON; data: rows).
_OWN_CHOICES = {"--input-format"}


def test_a_flag_name_has_one_meaning_in_every_command() -> None:
    """The same option string stores to the same destination, with the same action
    and the same choices, wherever it appears (issue 35 item 11: --format was the
    output in render and the input in data; chat --model was the engine's model)."""
    seen: dict[str, dict[tuple[object, ...], list[str]]] = {}
    for words, parser in all_parsers().items():
        for action in parser._actions:
            for flag in action.option_strings:
                choices = None if flag in _OWN_CHOICES else action.choices
                key = (action.dest, type(action).__name__, tuple(choices or ()))
                seen.setdefault(flag, {}).setdefault(key, []).append(words)
    differing = {flag: kinds for flag, kinds in seen.items() if len(kinds) > 1}
    assert differing == {}
    assert seen["--input-format"] and seen["--format"]
    assert [w for ws in seen["--format"].values() for w in ws] == ["render"]
