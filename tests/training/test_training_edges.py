"""Rows that used to lose training data or be refused without a word: calls without
ids, ``tools`` as JSON text, a conversation ending after its last answer, and header
fields that cannot be read back."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from harmonia import HarmonyEncoding, Message, Role
from harmonia.training import InputOptions, render_batch, render_for_training
from harmonia.training._cli import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Gets the weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def hf_row(tools: Any = TOOLS) -> dict[str, Any]:
    """The gpt-oss chat template's convention: calls and results carry no ids."""
    return {
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {"role": "assistant", "thinking": "Two calls.", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather",
                                                  "arguments": {"city": "Oslo"}}}]},
            {"role": "tool", "content": "3"},
            {"role": "assistant", "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Rome"}}]},
            {"role": "tool", "content": "20"},
            {"role": "assistant", "thinking": "Done.", "content": "Oslo 3, Rome 20."},
        ],
        "tools": tools,
        "date": "2025-06-28",
    }  # fmt: skip


def test_calls_without_ids_pair_with_results_by_order(enc: HarmonyEncoding) -> None:
    batch = render_batch([json.dumps(hf_row())])
    assert batch.stats.rows_ok == 1, batch.problems
    text = enc.decode(batch.input_ids[0])
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>3" in text
    assert text.index('"Oslo"') < text.index("<|message|>3<|end|>") < text.index('"Rome"')
    # Given ids, the same row renders the same ids.
    with_ids = hf_row()
    with_ids["messages"][1]["tool_calls"][0]["id"] = "a"
    with_ids["messages"][2]["tool_call_id"] = "a"
    with_ids["messages"][3]["tool_calls"] = [
        {"id": "b", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
    ]  # fmt: skip
    with_ids["messages"][4]["tool_call_id"] = "b"
    assert render_batch([json.dumps(with_ids)]).input_ids == batch.input_ids
    # A result with no call left to answer is still a mismatch.
    extra = hf_row()
    extra["messages"].insert(3, {"role": "tool", "content": "again"})
    assert [p.code for p, _ in render_batch([json.dumps(extra)]).rejected] == ["E130"]


@pytest.mark.parametrize("dialect", ["harmony", "hf"])
def test_tools_as_json_text_equal_tools_as_a_list(dialect: str) -> None:
    options = InputOptions(dialect=dialect, date="2025-06-28")  # type: ignore[arg-type]
    policy = "trl" if dialect == "hf" else "harmony"
    listed = render_batch([json.dumps(hf_row())], options=options, policy=policy)
    text = render_batch([json.dumps(hf_row(json.dumps(TOOLS)))], options=options, policy=policy)
    assert listed.stats.rows_ok == 1 and text.stats.rows_ok == 1, text.problems
    assert text.input_ids == listed.input_ids and text.loss_mask == listed.loss_mask
    bad = render_batch([json.dumps(hf_row("[not json"))], options=options, policy=policy)
    assert [p.code for p, _ in bad.rejected] == ["E150"]
    assert "not JSON" in bad.rejected[0][0].message


def test_a_trained_sample_ends_with_a_trained_stop(enc: HarmonyEncoding) -> None:
    """A conversation ending with a user message: its last final answer is trained
    with the <|return|> the model wrote, and the trailing message is left out."""

    def user(text: str) -> Message:
        return Message.from_role_and_content(Role.USER, text)

    def assistant(text: str, channel: str) -> Message:
        return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)

    conversation = [user("Q"), assistant("T", "analysis"), assistant("A", "final"), user("Q2")]
    for policy in ("harmony", "trl", "megatron", "final-only", "last-turn"):
        [sample] = render_for_training(conversation, enc, policy)
        trained = [i for i, m in enumerate(sample.loss_mask) if m]
        assert enc.decode([sample.input_ids[trained[-1]]]) == "<|return|>", policy
        assert trained[-1] == len(sample.input_ids) - 1, policy
        assert len(sample.reasons) == 4 and sample.reasons[3].startswith("left out"), policy
    [full] = render_for_training(conversation, enc, "full")  # every token: all kept
    assert enc.decode(full.input_ids).endswith("<|start|>user<|message|>Q2<|end|>")
    docs = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "So a trained sample ends with a trained stop" in docs
    assert "Messages after its last assistant message" in docs


def unreadable(field: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "channel": "final"},
    ]
    if field == "channel":
        messages[1]["channel"] = "final answer"
    elif field == "recipient":
        messages[1] = {"role": "assistant", "content": "{}", "channel": "commentary",
                       "recipient": "functions.<f>"}  # fmt: skip
        messages.append({"role": "assistant", "content": "Done.", "channel": "final"})
    else:
        messages[0]["name"] = "Ada Lovelace"
    return {"messages": messages}


def test_unreadable_header_fields_are_named_per_row_and_counted(tmp_path: Path) -> None:
    batch = render_batch(
        [json.dumps(unreadable(f)) for f in ("channel", "recipient", "author.name")],
        options=InputOptions(format="harmony"),
    )
    found = [(p.code, p.message) for p, _ in batch.rejected]
    assert [code for code, _ in found] == ["E151"] * 3, batch.problems
    assert "message 1 field channel: channel 'final answer'" in found[0][1]
    assert "message 1 field recipient" in found[1][1]
    assert "message 0 field author.name" in found[2][1]
    assert batch.stats.to_dict()["refused_fields"] == {
        "author.name": 1,
        "channel": 1,
        "recipient": 1,
    }
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(unreadable("channel")) + "\n", encoding="utf-8")
    out = io.StringIO()
    main(["stats", str(path)], stdout=out)
    assert "refused channel: 1" in out.getvalue() and "E151: 1" in out.getvalue()
    assert "E151" in DOCS.read_text(encoding="utf-8")


def test_work_is_split_into_chunks_the_input_alone_decides(tmp_path: Path) -> None:
    from harmonia.training import _runner

    sizes = {}
    for lines in (40, 100, 5_000, 70_000):
        path = tmp_path / f"in-{lines}.jsonl"
        path.write_bytes(b"{}\n" * lines)
        [task] = _runner._plan([path], 100_000)[0]
        sizes[lines] = [c.first_line for c in task.chunks]
        covered = b"".join(path.read_bytes()[c.start : c.end] for c in task.chunks)
        assert covered == path.read_bytes()
        assert all(c.start < c.end for c in task.chunks)
    assert sizes[40] == [1, 17, 33]  # small inputs: 16-line chunks, so every worker has work
    assert sizes[100][:3] == [1, 17, 33] and len(sizes[100]) == 7
    assert sizes[5_000][:2] == [1, 81] and len(sizes[5_000]) == 63  # about 64 a file
    assert sizes[70_000][:2] == [1, 513]  # at most 512 lines at once: memory stays flat
    # Chunks never cross a shard boundary, and a last line without "\n" is one.
    path = tmp_path / "tail.jsonl"
    path.write_bytes(b"{}\n" * 40 + b"{}")
    tasks = _runner._plan([path], 20)[0]
    assert [[c.first_line for c in t.chunks] for t in tasks] == [[1, 17], [21, 37], [41]]


def test_two_workers_on_a_small_input_write_what_one_writes(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
    from harmonia.training import BuildOptions, _runner, build

    seen: list[int] = []
    real = _runner.render_batch

    def counting(rows: list[bytes], **kwargs: Any) -> Any:
        seen.append(len(rows))
        return real(rows, **kwargs)

    monkeypatch.setattr(_runner, "render_batch", counting)
    one, two = tmp_path / "one", tmp_path / "two"
    build([corpus], one, options=BuildOptions(workers=1, progress="none"))
    assert len(seen) > 2 and max(seen) <= 16  # a small file: many small chunks, one shard
    build([corpus], two, options=BuildOptions(workers=2, progress="none"))
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    assert not any(name.startswith(".chunk") for name in names)
    for name in names:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
