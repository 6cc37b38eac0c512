"""Broken rows of every kind, in every input shape: each one is rejected with its
line, code and message, and every good row is kept (``build`` and ``validate`` agree)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from harmonia.training import render_batch
from harmonia.training._cli import main

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Gets the weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def openai_row(content: Any = "Hi", role: str = "user") -> dict[str, Any]:
    user: dict[str, Any] = {"role": role}
    if content is not ...:
        user["content"] = content
    return {"messages": [user, {"role": "assistant", "content": "Hello."}]}


def sharegpt_row(value: Any = "Hi", who: str = "human") -> dict[str, Any]:
    turn: dict[str, Any] = {"from": who}
    if value is not ...:
        turn["value"] = value
    return {"conversations": [turn, {"from": "gpt", "value": "<think>Easy.</think>Hello."}]}


def thinking_row(content: Any = "Hi", role: str = "user") -> dict[str, Any]:
    user: dict[str, Any] = {"role": role}
    if content is not ...:
        user["content"] = content
    return {
        "messages": [
            user,
            {"role": "assistant", "thinking": "Look it up.", "content": None, "tool_calls": [
                {"type": "function", "function": {"name": "get_weather",
                                                  "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": "{\"temp\": 3}"},
            {"role": "assistant", "thinking": "Cold.", "content": "3 degrees."},
        ],
        "tools": [TOOL],
    }  # fmt: skip


SHAPES = (openai_row, sharegpt_row, thinking_row)
GOOD = 0
#: (kind, expected code) for each kind of broken row
KINDS = {
    "bad_json": "E101",
    "unknown_role": "E110",
    "invalid_utf8": "E104",
    "missing_content": "E105",
}


def broken(kind: str, shape: Any) -> bytes:
    if kind == "bad_json":
        return json.dumps(shape())[:-3].encode()
    if kind == "unknown_role":
        who = "wizard"
        row = shape(who=who) if shape is sharegpt_row else shape(role=who)
        return json.dumps(row).encode()
    if kind == "invalid_utf8":
        return json.dumps(shape("Cafe")).encode().replace(b"Cafe", b"Caf\xe9")
    return json.dumps(shape(...)).encode()


def mixed_file(path: Path) -> tuple[set[int], dict[int, str]]:
    """Good rows of each shape with every broken kind in every shape between them."""
    lines: list[bytes] = []
    good: set[int] = set()
    bad: dict[int, str] = {}
    for shape in SHAPES:
        for kind, code in KINDS.items():
            lines.append(json.dumps(shape()).encode())
            good.add(len(lines))
            lines.append(broken(kind, shape))
            bad[len(lines)] = code
    path.write_bytes(b"\n".join(lines) + b"\n")
    return good, bad


def test_every_broken_kind_is_rejected_in_every_shape() -> None:
    for shape in SHAPES:
        batch = render_batch([json.dumps(shape())])
        assert batch.stats.rows_ok == 1, (shape.__name__, batch.problems)
        for kind, code in KINDS.items():
            batch = render_batch([broken(kind, shape)], line_numbers=[7])
            assert [(p.code, p.line) for p, _ in batch.rejected] == [(code, 7)], (
                shape.__name__,
                kind,
                batch.problems,
            )
            assert batch.rejected[0][0].message


def test_sharegpt_turn_without_value_is_never_the_text_null() -> None:
    batch = render_batch([json.dumps(sharegpt_row(None))])
    assert [p.code for p, _ in batch.rejected] == ["E105"]
    assert "conversations[0]" in batch.rejected[0][0].message


def test_assistant_with_only_tool_calls_is_fine() -> None:
    row = {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
            {"role": "assistant", "content": "3 degrees."},
        ],
        "tools": [TOOL],
    }  # fmt: skip
    assert render_batch([json.dumps(row)]).stats.rows_ok == 1
    empty = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant"}]}
    assert [p.code for p, _ in render_batch([json.dumps(empty)]).rejected] == ["E105"]


def test_invalid_utf8_names_the_byte_and_keeps_the_raw_row_readable() -> None:
    batch = render_batch([b'{"messages": [{"role": "user", "content": "Caf\xe9"}]}'])
    problem, raw = batch.rejected[0]
    assert problem.code == "E104" and "byte 46" in problem.message
    assert "Caf" in raw


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def _rejects(path: Path) -> dict[int, str]:
    return {r["line"]: r["code"] for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("dialect", ["harmony", "hf"])
def test_build_keeps_exactly_the_good_rows_and_validate_agrees(
    tmp_path: Path, dialect: str
) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="the parquet extra is not installed")
    path = tmp_path / "mixed.jsonl"
    good, bad = mixed_file(path)
    hf = ["--dialect", "hf", "--date", "2025-06-28", "--policy", "trl"]
    extra = hf if dialect == "hf" else []
    if dialect == "hf":  # the template reads messages rows only
        good = {n for n in good if (n - 1) // (2 * len(KINDS)) != 1}
        bad = {n: c for n, c in bad.items() if (n - 1) // (2 * len(KINDS)) != 1}
        lines = path.read_bytes().splitlines()
        path.write_bytes(b"".join(
            (line if (n - 1) // (2 * len(KINDS)) != 1 else b"") + b"\n"
            for n, line in enumerate(lines, 1)
        ))  # fmt: skip
    out = tmp_path / "out"
    status, text = run(
        "build", str(path), "-o", str(out), "--progress", "none", "--max-reject-rate", "1",
        "--shard-rows", "5", *extra,
    )  # fmt: skip
    assert status == 0, text
    rows = pq.read_table(sorted(out.glob("part-*.parquet"))).column("source_line").to_pylist()
    assert set(rows) == good
    assert _rejects(out / "rejects.jsonl") == bad
    for record in map(json.loads, (out / "rejects.jsonl").read_text().splitlines()):
        assert record["message"] and record["row"]
    rejects = tmp_path / "validate-rejects.jsonl"
    status, text = run(
        "validate", str(path), "--rejects", str(rejects), "--max-reject-rate", "1", *extra
    )
    assert status == 0 and _rejects(rejects) == bad
    for line, code in bad.items():
        assert f"{path}:{line}: {code} " in text
    # --strict refuses any rejected row whatever --max-reject-rate says.
    status, text = run("validate", str(path), "--max-reject-rate", "1", "--strict", *extra)
    assert status == 1 and "--strict" in text
    status, _ = run(
        "build", str(path), "-o", str(tmp_path / "strict"), "--progress", "none",
        "--max-reject-rate", "1", "--strict", *extra,
    )  # fmt: skip
    assert status == 1


def test_nothing_left_is_an_error_whatever_the_reject_rate(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra is not installed")
    path = tmp_path / "bad.jsonl"
    path.write_bytes(broken("bad_json", openai_row) + b"\n" + broken("invalid_utf8", openai_row))
    status, text = run(
        "build", str(path), "-o", str(tmp_path / "out"), "--progress", "none",
        "--max-reject-rate", "1",
    )  # fmt: skip
    assert status == 1 and "no row" in text
    status, text = run("validate", str(path), "--max-reject-rate", "1")
    assert status == 1 and "no row" in text


def test_inspect_reads_a_row_beside_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(json.dumps(openai_row()).encode() + b"\n" + broken("invalid_utf8", openai_row))
    status, text = run("inspect", str(path), "--row", "1", "--color", "never")
    assert status == 0 and "Hello." in text
    assert run("inspect", str(path), "--row", "2")[0] == 1  # E104, said on stderr
