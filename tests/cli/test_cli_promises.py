"""The command line keeps docs/cli.md's promises with bad input (issue 35).

Every refusal is one line on stderr naming the flag (never a traceback, a
temporary file or a settings field), exits 1, and leaves nothing behind: no
output folder, no chunk files, no replaced input.
"""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import pytest

from harmonia._cli.main import main

ROW = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
BINARY = bytes(range(256)) * 4


def refused(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 1) -> str:
    """Run ``harmonia argv``; assert the status and a one-line error; return the line."""
    assert main(list(argv)) == status, argv
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and ".tmp-" not in err, err
    return lines[0]


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(ROW) + "\n" for _ in range(3)))
    return path


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# -- item 4: no tracebacks ------------------------------------------------------------


def test_a_bogus_compression_is_refused_before_any_chunk(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow", reason="data build needs the parquet extra")
    before = _files(tmp_path)
    line = refused(capsys, "data", "build", str(rows), "-o", str(tmp_path / "out"),
                   "--compression", "bogus")  # fmt: skip
    assert line.startswith("harmonia data build: --compression 'bogus' is not a Parquet codec")
    assert _files(tmp_path) == before  # no output folder, no .chunk-* files


@pytest.mark.parametrize("flag", ["--load", "--script"])
def test_chat_refuses_a_binary_file_in_one_line(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(BINARY)
    line = refused(capsys, "chat", "--engine", "scripted", flag, str(blob), "--prompt", "Hi")
    assert line.startswith(f"harmonia chat: {blob} is not UTF-8 text (byte 0x80 at offset 128)")


def test_chat_load_says_what_a_file_that_is_not_json_should_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    line = refused(capsys, "chat", "--engine", "scripted", "--load", str(bad), "--prompt", "Hi")
    assert line == (
        f"harmonia chat: {bad} is not JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2; --load takes a conversation (harmony JSON, as --save writes, "
        "or a Chat request)"
    )


def test_serve_refuses_a_binary_script_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(BINARY)
    line = refused(capsys, "serve", "--engine", "scripted", "--script", str(blob), "--port", "0")
    assert line.startswith(f"harmonia serve: {blob} is not UTF-8 text")


# -- item 5: serve's port --------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_refuses_a_port_out_of_range(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    line = refused(capsys, "serve", "--engine", "scripted", "--port", port)
    assert line == f"harmonia serve: --port must be from 1 to 65535 (0: any free port), got {port}"


def test_serve_refuses_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused(capsys, "serve", "--engine", "scripted", "--port", str(port))
    assert line.startswith(f"harmonia serve: --port {port}: cannot listen on 127.0.0.1:{port}")


# -- item 7: an output is never an input -----------------------------------------------


def test_data_validate_never_replaces_its_input(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = rows.read_bytes()
    monkeypatch.chdir(tmp_path)
    for rejects in (str(rows), "rows.jsonl", "./sub/../rows.jsonl"):
        line = refused(capsys, "data", "validate", "rows.jsonl", "--rejects", rejects, "--force")
        assert f"--rejects {rejects} is the same path as the input" in line
    line = refused(capsys, "data", "validate", "rows.jsonl", "--report", "rows.jsonl", "--force")
    assert "--report rows.jsonl is the same path as the input" in line
    line = refused(capsys, "data", "validate", "rows.jsonl", "--rejects", "r.json",
                   "--report", "r.json")  # fmt: skip
    assert "--report r.json is the same path as --rejects" in line
    assert rows.read_bytes() == original
    assert _files(tmp_path) == {"rows.jsonl"}


def test_every_output_flag_refuses_an_input(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = tmp_path / "c.ids"
    ids.write_text("[200005, 17]")
    original = ids.read_text()
    line = refused(capsys, "inspect", str(ids), "--html", str(ids), "--force")
    assert "--html" in line and "the same path as the input" in line
    assert ids.read_text() == original
    line = refused(capsys, "data", "inspect", str(rows), "--row", "1", "--html", str(rows),
                   "--force")  # fmt: skip
    assert "--html" in line and "the same path as the input" in line
    # a build folder that would swallow its own input
    line = refused(capsys, "data", "build", str(rows), "-o", str(tmp_path), "--force")
    assert "a folder holding the input" in line
    built = tmp_path / "built"
    built.mkdir()
    (built / "manifest.json").write_text("{}")
    for command in ("pack", "export"):
        argv = ["data", command, str(built), "-o", str(built), "--force"]
        if command == "pack":
            argv += ["--seq-len", "64"]
        line = refused(capsys, *argv)
        assert "is the same path as the build" in line
    assert (built / "manifest.json").read_text() == "{}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["<|channel|>final<|message|>Hi<|return|>"]))
    line = refused(capsys, "chat", "--engine", "scripted", "--script", str(script),
                   "--save", str(script), "--force", "--prompt", "Hi")  # fmt: skip
    assert "--save" in line and "the same path as --script" in line


# -- item 8: dates ----------------------------------------------------------------------


@pytest.mark.parametrize("date", ["2025-13-45", "2025-02-30", "yesterday"])
def test_data_refuses_a_date_that_is_not_a_day(
    date: str, rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["validate"], ["build", "-o", str(tmp_path / "out")], ["stats"]):
        line = refused(capsys, "data", command[0], str(rows), *command[1:], "--date", date)
        assert f"--date {date!r} is not a date" in line
    assert not (tmp_path / "out").exists()


def test_a_row_date_that_is_not_a_day_is_no_date_line() -> None:
    from harmonia.training._inputs import InputOptions, row_date

    options = InputOptions(date="from-row")
    assert row_date({"date": "2025-13-45"}, options) is None
    assert row_date({"date": "2025-12-31"}, options) == "2025-12-31"
    with pytest.raises(Exception, match="date must be"):
        InputOptions(date="2025-13-45")


# -- item 9: a failed build leaves no folder --------------------------------------------


def test_a_failed_build_leaves_no_output_folder(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow", reason="data build needs the parquet extra")
    out = tmp_path / "out"
    line = refused(capsys, "data", "build", str(tmp_path / "missing.jsonl"), "-o", str(out))
    assert line == f"harmonia data build: cannot read {tmp_path / 'missing.jsonl'}: " + (
        "No such file or directory"
    )
    assert not out.exists()
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text("not gzip\n")
    line = refused(capsys, "data", "build", str(fake), "-o", str(out))
    assert line.startswith(f"harmonia data build: {fake} is not a valid gzip file")
    assert not out.exists()
    # a truncated gzip fails later, in the middle of reading: the folder goes too
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(rows.read_bytes() * 200)[:-30])
    line = refused(capsys, "data", "build", str(truncated), "-o", str(out))
    assert line.startswith(f"harmonia data build: {truncated} is not a valid gzip file")
    assert not out.exists()


# -- item 10: errors name the flag, one wording, the file ------------------------------


def test_errors_name_the_flag_not_the_field(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refused(capsys, "chat", "--engine", "scripted", "--max-tokens", "0", "--prompt", "x")
    assert line == "harmonia chat: --max-tokens must be an int >= 1, not 0"
    line = refused(capsys, "tools", "python", "--timeout", "0", "print(1)")
    assert line == "harmonia tools python: --timeout must be a positive number of seconds, got 0.0"
    for flag in ("--workers", "--shard-rows"):
        line = refused(capsys, "data", "build", str(rows), "-o", str(tmp_path / "o"), flag, "0")
        assert line == f"harmonia data build: {flag} must be at least 1, got 0"
    uvicorn = pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    assert uvicorn
    line = refused(capsys, "serve", "--engine", "scripted", "--store", "bogus")
    assert line.startswith("harmonia serve: --store: use 'sqlite:PATH'")
    line = refused(capsys, "serve", "--engine", "scripted", "--date", "2025-13-45")
    assert line.startswith("harmonia serve: --date '2025-13-45'")
    line = refused(capsys, "serve", "--engine", "scripted", "--queue-size", "-1")
    assert line == "harmonia serve: --queue-size must be >= 0"


def test_an_output_in_a_missing_folder_names_the_output_not_a_temporary_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = tmp_path / "c.ids"
    ids.write_text("[200005, 17]")
    page = tmp_path / "missing" / "page.html"
    line = refused(capsys, "inspect", str(ids), "--html", str(page))
    assert line == (
        f"harmonia inspect: cannot write {page}: the folder {page.parent} does not exist; "
        "create it first"
    )


def test_chat_save_to_a_missing_folder_fails_before_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save = tmp_path / "missing" / "chat.json"
    assert main(["chat", "--engine", "scripted", "--prompt", "Hi", "--save", str(save)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no answer was generated, and lost
    assert captured.err.strip() == (
        f"harmonia chat: cannot write {save}: the folder {save.parent} does not exist; "
        "create it first"
    )


def test_an_unreadable_file_is_worded_one_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    lines = [
        refused(capsys, "render", str(missing)),
        refused(capsys, "parse", str(missing)),
        refused(capsys, "data", "validate", str(missing)),
        refused(capsys, "data", "inspect", str(missing), "--row", "1"),
        refused(capsys, "chat", "--engine", "scripted", "--load", str(missing), "--prompt", "x"),
        refused(capsys, "chat", "--engine", "scripted", "--script", str(missing), "--prompt", "x"),
    ]
    for line in lines:
        assert line.endswith(f": cannot read {missing}: No such file or directory"), line


def test_a_corrupt_gz_names_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text("not gzip\n")
    for argv in (
        ["validate", str(fake)],
        ["stats", str(fake)],
        ["inspect", str(fake), "--row", "1"],
    ):
        line = refused(capsys, "data", *argv)
        assert f"{fake} is not a valid gzip file" in line


def test_stats_of_an_interrupted_build_suggests_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = tmp_path / "out"
    build.mkdir()
    (build / ".progress.json").write_text("{}")
    line = refused(capsys, "data", "stats", str(build))
    assert "interrupted build" in line and "--resume" in line
    pytest.importorskip("pyarrow", reason="data pack needs the parquet extra")
    line = refused(capsys, "data", "pack", str(build), "-o", str(tmp_path / "p"), "--seq-len", "8")
    assert "interrupted build" in line and "--resume" in line


# -- item 12: nonsense is refused ------------------------------------------------------


def test_nonsense_combinations_are_refused(
    rows: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "out")
    line = refused(capsys, "data", "build", str(rows), "-o", out, "--resume", "--force")
    assert "--resume continues a build and --force replaces it" in line
    line = refused(capsys, "chat", "--engine", "scripted", "--url", "http://x", "--prompt", "x")
    assert "--url is for --engine vllm or llama.cpp, not --engine scripted" in line
    line = refused(capsys, "data", "validate", str(rows), "--map", "user=q")
    assert "--map names the columns of --input-format columns" in line
    columns = tmp_path / "columns.jsonl"
    columns.write_text('{"q": "hi", "a": "hello"}\n')
    mapped = ["--input-format", "columns", "--map", "user=q,final=a"]
    assert main(["data", "validate", str(columns), *mapped]) == 0  # --map with columns works
    columns.unlink()
    line = refused(capsys, "render", str(rows), "--mode", "conversation", "--next-role", "user")
    assert "--next-role" in line and "--mode completion" in line
    for rate in ("2", "-1"):
        line = refused(capsys, "data", "validate", str(rows), "--max-reject-rate", rate)
        assert f"--max-reject-rate {rate} is not a fraction" in line
    line = refused(capsys, "data", "pack", out, "-o", str(tmp_path / "p"),
                   "--seq-len", "99999999999999999999")  # fmt: skip
    assert "--seq-len must be from 1 to" in line
    assert _files(tmp_path) == {"rows.jsonl"}


# -- item 6: chat --load reads a Chat Completions request as render does ---------------


def test_chat_load_reads_a_chat_request_as_render_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    request = {
        "model": "gpt-oss-20b",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
        ],
        "tools": [tool],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    argv = ["chat", "--engine", "scripted", "--load", str(path), "--prompt", "Again", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        f"harmonia chat: read {path} as a Chat Completions request (field 'model')"
    )
    system, developer, *rest = json.loads(captured.out)["conversation"]["messages"]
    assert system["role"] == "system" and "model_identity" in system["content"][0]
    assert developer["role"] == "developer"
    assert developer["content"][0]["instructions"] == "You are terse."
    tools = developer["content"][0]["tools"]["functions"]["tools"]
    assert [t["name"] for t in tools] == ["get_weather"]
    assert [m["role"] for m in rest[:3]] == ["user", "assistant", "user"]
