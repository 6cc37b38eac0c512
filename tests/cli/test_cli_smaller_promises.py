"""The smaller things a newcomer met (issue 35, item 13), each as it should read now."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from harmonia._cli.main import main


def _rows(path: Path, contents: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": c},
                        {"role": "assistant", "content": "ok"},
                    ]
                }
            )
            + "\n"
            for c in contents
        )
    )
    return path


def test_bad_json_is_at_one_place_in_validate_and_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(tmp_path / "in.jsonl", ["a", "b"])
    rows.write_text(rows.read_text() + '{"messages": [}\n')
    rejects = tmp_path / "rejects.jsonl"
    argv = ["data", "validate", str(rows), "--rejects", str(rejects), "--max-reject-rate", "1"]
    assert main(argv) == 0
    said = capsys.readouterr().out.splitlines()[0]
    assert said == f"{rows}:3: E101 bad_json (error): not JSON: Expecting value at column 15"
    record = json.loads(rejects.read_text())
    assert record["line"] == 3 and record["message"] == "not JSON: Expecting value at column 15"
    assert main(["data", "inspect", str(rows), "--row", "3"]) == 1
    err = capsys.readouterr().err
    assert err.strip().endswith(f"{rows}:3: E101 not JSON: Expecting value at column 15")


def test_stats_of_a_build_sorts_lengths_as_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow", reason="data build needs the parquet extra")
    rows = _rows(tmp_path / "in.jsonl", ["hi", "word " * 100, "word " * 700])
    assert main(["data", "build", str(rows), "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["data", "stats", str(tmp_path / "out")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "lengths" in x)
    buckets = [int(part.split(":")[0].strip(" <=")) for part in line.split(": ", 1)[1].split(",")]
    assert len(buckets) == 3 and buckets == sorted(buckets), line
    assert main(["data", "stats", str(tmp_path / "out"), "--json"]) == 0
    lengths = json.loads(capsys.readouterr().out)["lengths"]
    assert list(lengths) == sorted(lengths, key=int)


def test_pack_and_export_folders_get_the_mode_build_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow", reason="data build needs the parquet extra")
    rows = _rows(tmp_path / "in.jsonl", ["a", "b"])
    out = tmp_path / "out"
    assert main(["data", "build", str(rows), "-o", str(out)]) == 0
    assert main(["data", "pack", str(out), "-o", str(tmp_path / "p"), "--seq-len", "256"]) == 0
    assert main(["data", "export", str(out), "-o", str(tmp_path / "e")]) == 0
    mode = stat.S_IMODE(out.stat().st_mode)
    assert stat.S_IMODE((tmp_path / "p").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "e").stat().st_mode) == mode
    capsys.readouterr()


@pytest.mark.parametrize(
    ("rows_text", "args", "said"),
    [
        pytest.param('{"prompt": "2+2?"}\n', [], "'completion' is missing", id="trl-prompt"),
        pytest.param(
            '{"question": "2+2?", "answer": "4"}\n',
            ["--input-format", "columns"],
            "--map SLOT=COLUMN",
            id="columns-without-map",
        ),
    ],
)
def test_validate_names_what_a_row_lacks_first(
    rows_text: str, args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt without completion names ``completion``; columns without ``--map``
    say how to name them."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(rows_text)
    assert main(["data", "validate", str(rows), *args]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert said in first


def test_inspect_of_an_empty_file_counts_nothing_it_does_not_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["inspect", str(empty), "--color", "never"]) == 0
    assert capsys.readouterr().out == "0 tokens, 0 messages, 0 diagnostics\n"


def test_counts_of_one_are_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "one.txt"
    text.write_text("<|start|>assistant<|message|>x<|end|>")
    assert main(["inspect", str(text), "--text", "--color", "never"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("5 tokens, 1 message, 0 diagnostics"), out
    assert "· 5 tokens from #0" in out[0]
    single = tmp_path / "single.txt"
    single.write_text("<|start|>")
    assert main(["inspect", str(single), "--text", "--color", "never"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "· 1 token from #0" in out[0] and out[-1].startswith("1 token, 0 messages"), out


def test_parse_of_a_cut_id_list_says_it_was_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.ids"
    cut.write_text("[200005, 17")
    assert main(["parse", str(cut)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harmonia parse: {cut} starts a JSON list of token ids with '['")
    assert "no closing ']'" in err


def test_an_unknown_option_is_reported_by_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "--bogus", "x"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "harmonia parse: error: unrecognized arguments: --bogus"
    )
    assert main(["data", "stats", "x", "--bogus"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "harmonia data stats: error: unrecognized arguments: --bogus"
    )


@pytest.mark.parametrize("command", ["stats", "inspect", "pack", "export", "validate", "build"])
def test_only_the_commands_with_max_reject_rate_mention_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", command, "--help"]) == 0
    mentions = "--max-reject-rate" in capsys.readouterr().out
    assert mentions == (command in ("validate", "build"))
