"""``harmonia data``, called through the function the ``harmonia`` command wires in."""

from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path

import pytest

from harmonia._options import Commands
from harmonia.training._cli import add_subcommand, main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def test_add_subcommand_plugs_into_a_parser() -> None:
    parser = argparse.ArgumentParser(prog="harmonia")
    add_subcommand(Commands(parser))
    args = parser.parse_args(["data", "inspect", "x.jsonl", "--row", "3", "--policy", "trl"])
    assert args.command == "data" and args.data_command == "inspect" and callable(args.func)


def test_validate_reports_codes_lines_and_exit_status(corpus: Path, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    status, text = run("validate", str(corpus), "--rejects", str(rejects))
    assert status == 1  # six bad rows, and the default allows none
    assert f"{corpus}:37: E101 bad_json (error)" in text
    assert "rows_rejected: 6" in text and "formats: openai (233)" in text
    assert len(rejects.read_text().splitlines()) == 6
    status, _ = run("validate", str(corpus), "--max-reject-rate", "0.05")
    assert status == 0


def test_validate_and_inspect_read_gzip(corpus: Path, tmp_path: Path) -> None:
    packed = tmp_path / "corpus.jsonl.gz"
    packed.write_bytes(gzip.compress(corpus.read_bytes()))
    status, text = run("validate", str(packed))
    assert status == 1
    assert f"{packed}:37: E101 bad_json (error)" in text and "rows_rejected: 6" in text
    zipped = run("inspect", str(packed), "--row", "3")[1]
    assert zipped.replace(str(packed), str(corpus)) == run("inspect", str(corpus), "--row", "3")[1]


def test_build_stats_and_policy_options(corpus: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    out = tmp_path / "out"
    status, text = run(
        "build", str(corpus), "-o", str(out), "--policy", "trl", "--max-length", "400",
        "--progress", "none", "--max-reject-rate", "1",
    )  # fmt: skip
    assert status == 0 and "wrote 1 shard(s)" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy"]["turn_start"] is True and manifest["policy"]["max_length"] == 400
    assert manifest["stats"]["problems"].get("E140", 0) > 0
    status, text = run("stats", str(out), "--json")
    assert status == 0 and json.loads(text) == manifest["stats"]
    status, text = run("stats", str(corpus), "--policy", "trl", "--max-length", "400")
    assert status == 0 and f"samples: {manifest['stats']['samples']}" in text


def test_inspect_says_why_in_the_terminal_and_html(tmp_path: Path) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "reasoning_content": "T1", "content": "A1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "reasoning_content": "T2", "content": "A2"},
        ]
    }
    data = tmp_path / "one.jsonl"
    data.write_text("\n" + json.dumps(row) + "\n")
    page = tmp_path / "view.html"
    status, text = run("inspect", str(data), "--row", "2", "--color", "never", "--html", str(page))
    assert status == 0
    assert "⟦<|channel|>analysis<|message|>T2" in text
    assert "assistant/final: context: the sequence lacks reasoning" in text
    assert "assistant/analysis: left out of the sequence by the reasoning rule" in text
    html = page.read_text()
    assert "T2" in html and "lacks reasoning" in html and "<span" in html
    status, text = run("inspect", str(data), "--row", "2", "--color", "always")
    assert "\x1b[32m" in text  # the trained final, green
    status, _ = run("inspect", str(data), "--row", "9")
    assert status == 1


def test_help_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--help")[0] == 0
    assert "validate" in capsys.readouterr().out


def test_importing_the_package_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, harmonia.training, harmonia.training._cli; "
        "print([m for m in ('pyarrow', 'numpy', 'datasets', 'ray', 'pandas', 'jinja2') "
        "if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_inspect_in_the_hf_dialect(tmp_path: Path) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "thinking": "T", "content": "A"},
        ]
    }
    data = tmp_path / "hf.jsonl"
    data.write_text(json.dumps(row) + "\n")
    status, text = run(
        "inspect", str(data), "--row", "1", "--dialect", "hf", "--date", "2025-01-01",
        "--policy", "trl", "--color", "never",
    )  # fmt: skip
    assert status == 0 and "hf dialect, policy trl" in text
    assert "Current date: 2025-01-01" in text
    assert "⟦<|start|>assistant<|channel|>analysis<|message|>T<|end|>" in text
