"""Every subcommand, given a missing, empty, binary or folder input, or conflicting ones.

Each case asserts what docs/cli.md promises: the documented exit status, one
line on stderr that names the command (``harmonia COMMAND: ...``) and never a
traceback, and nothing left behind in the folder it ran in (no output, no
temporary file, no half-made folder). A few cases are not refusals: they are
listed in ``NOT_REFUSED`` with what happens instead.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from harmonia._cli.main import main

#: Each command with ``IN`` where the input goes (outputs are relative: they must
#: not appear). ``tools python`` reads its code from a file given as standard input.
COMMANDS: dict[str, list[str]] = {
    "render": ["render", "IN"],
    "schema": ["schema", "IN"],
    "parse": ["parse", "IN"],
    "inspect": ["inspect", "IN", "--html", "page.html"],
    "chat --load": [
        "chat",
        "--engine",
        "scripted",
        "--load",
        "IN",
        "--prompt",
        "x",
        "--save",
        "c.json",
    ],
    "chat --script": ["chat", "--engine", "scripted", "--script", "IN", "--prompt", "x"],
    "serve --script": ["serve", "--engine", "scripted", "--script", "IN", "--port", "0"],
    "tools browser": ["tools", "browser", "search", "x", "--browser", "IN"],
    "tools serve-mcp": ["tools", "serve-mcp", "browser", "--browser", "IN", "--port", "0"],
    "data validate": ["data", "validate", "IN", "--rejects", "r.jsonl", "--report", "r.json"],
    "data build": ["data", "build", "IN", "-o", "out"],
    "data stats": ["data", "stats", "IN"],
    "data inspect": ["data", "inspect", "IN", "--row", "1", "--html", "row.html"],
    "data pack": ["data", "pack", "IN", "-o", "out", "--seq-len", "64"],
    "data export": ["data", "export", "IN", "-o", "out"],
}

KINDS = ("missing", "empty", "binary", "folder")

#: Cases that are not a refusal on stderr: the status, words on stdout, the outputs.
NOT_REFUSED: dict[tuple[str, str], tuple[int, str, set[str]]] = {
    # a view of nothing: an empty input has no tokens, and the page says so
    ("inspect", "empty"): (0, "wrote page.html", {"page.html"}),
    # a folder is what it reads: a folder without pages finds nothing
    ("tools browser", "folder"): (0, "", set()),
    # a binary line is a rejected row (E104), reported with the others; --rejects
    # and --report are written (they say why), a build with nothing to train is not
    ("data validate", "binary"): (1, "E104", {"r.jsonl", "r.json"}),
    ("data build", "binary"): (1, "E104", set()),
    ("data stats", "binary"): (0, "E104", set()),
}
#: Cases not run, and why (not skips: CI's pass 2 allows none).
NOT_RUN = {("tools serve-mcp", "folder"): "a folder is a valid input: it would serve until stopped"}

#: Conflicting inputs: the argv, the exit status and words the error must hold.
CONFLICTS: dict[str, tuple[list[str], int, str]] = {
    "inspect --html is its input": (["inspect", "IN", "--html", "IN", "--force"], 1, "same path"),
    "parse --ids and --text": (["parse", "IN", "--ids", "--text"], 2, "not allowed with"),
    "render --next-role in conversation mode": (
        ["render", "IN", "--mode", "conversation", "--next-role", "user"],
        1,
        "--next-role",
    ),
    "chat --save is its --script": (
        ["chat", "--engine", "scripted", "--script", "IN", "--save", "IN", "--force"],
        1,
        "same path",
    ),
    "chat scripted with --url": (
        ["chat", "--engine", "scripted", "--url", "http://127.0.0.1:9", "--prompt", "x"],
        1,
        "--url is for",
    ),
    "serve scripted with --url": (
        ["serve", "--engine", "scripted", "--url", "http://127.0.0.1:9", "--port", "0"],
        1,
        "--url is for",
    ),
    "data validate --rejects is its input": (
        ["data", "validate", "IN", "--rejects", "IN", "--force"],
        1,
        "same path",
    ),
    "data validate --rejects is --report": (
        ["data", "validate", "IN", "--rejects", "x.json", "--report", "x.json"],
        1,
        "same path",
    ),
    "data build -o holds its input": (["data", "build", "IN", "-o", ".", "--force"], 1, "holding"),
    "data build --resume --force": (
        ["data", "build", "IN", "-o", "out", "--resume", "--force"],
        1,
        "give one of them",
    ),
    "data validate --map without columns": (
        ["data", "validate", "IN", "--map", "user=q"],
        1,
        "--input-format columns",
    ),
    "data inspect --html is its input": (
        ["data", "inspect", "IN", "--row", "1", "--html", "IN", "--force"],
        1,
        "same path",
    ),
    "data pack -o is its build": (
        ["data", "pack", "IN", "-o", "IN", "--seq-len", "8", "--force"],
        1,
        "same path",
    ),
    "data export -o is its build": (
        ["data", "export", "IN", "-o", "IN", "--force"],
        1,
        "same path",
    ),
}


def _make(kind: str, folder: Path) -> str:
    path = folder / {"missing": "nothing.json", "folder": "a-folder"}.get(kind, f"{kind}.json")
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(bytes(range(128, 256)) * 8)
    elif kind == "folder":
        path.mkdir()
    return path.name


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv, stdout=out)
    return status, out.getvalue(), err.getvalue()


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


CASES = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in COMMANDS
    for kind in KINDS
    if (name, kind) not in NOT_RUN
]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_bad_input_is_one_line_and_leaves_nothing(
    name: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name.startswith(("serve", "tools serve-mcp")):
        pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    if name == "tools serve-mcp":
        pytest.importorskip("mcp", reason="serve-mcp needs the mcp extra")
    if name in ("data build", "data pack", "data export"):
        pytest.importorskip("pyarrow", reason=f"{name} needs the parquet extra")
    monkeypatch.chdir(tmp_path)
    given = _make(kind, tmp_path)
    before = _listing(tmp_path)
    argv = [given if word == "IN" else word for word in COMMANDS[name]]
    status, out, err = _run(argv)
    assert "Traceback" not in err + out
    if (name, kind) in NOT_REFUSED:
        expected, words, outputs = NOT_REFUSED[(name, kind)]
        assert status == expected, (status, err)
        assert words in out, out
        assert _listing(tmp_path) - before == outputs
        return
    assert _listing(tmp_path) == before, "left behind"
    assert status == 1, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    command = "tools browser search" if name == "tools browser" else name.split(" --")[0]
    assert lines[0].startswith(f"harmonia {command}: "), lines[0]
    assert given in lines[0], lines[0]  # the input is named


def _input_for(argv: list[str], folder: Path) -> str:
    """A valid input of the kind the command reads, so only the conflict is wrong."""
    if argv[0] in ("render",):
        (folder / "in.json").write_text('{"messages": [{"role": "user", "content": "Hi"}]}')
        return "in.json"
    if argv[0] in ("inspect", "parse"):
        (folder / "in.ids").write_text("[200005, 173]")
        return "in.ids"
    if argv[0] == "chat":
        (folder / "script.json").write_text('["<|channel|>final<|message|>Hi<|return|>"]')
        return "script.json"
    if argv[:2] in (["data", "pack"], ["data", "export"]):
        (folder / "built").mkdir()
        (folder / "built" / "manifest.json").write_text("{}")
        return "built"
    (folder / "in.jsonl").write_text(
        '{"messages": [{"role": "user", "content": "Hi"}, '
        '{"role": "assistant", "content": "Hello"}]}\n'
    )
    return "in.jsonl"


@pytest.mark.parametrize("case", list(CONFLICTS))
def test_conflicting_inputs_are_refused_and_leave_nothing(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, expected, words = CONFLICTS[case]
    if argv[0] == "serve":
        pytest.importorskip("uvicorn", reason="serve needs the serve extra")
    monkeypatch.chdir(tmp_path)
    given = _input_for(argv, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    listing = _listing(tmp_path)
    status, _, err = _run([given if word == "IN" else word for word in argv])
    assert status == expected, (status, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and words in lines[-1], err
    if expected == 1:
        assert len(lines) == 1 and lines[0].startswith("harmonia "), err
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # no input replaced
    assert _listing(tmp_path) == listing  # no output made
