"""What a new user feeds the command line: format detection, defaults, and bad inputs.

Every bad input must give exactly one line on stderr (what, where, how to fix
it) and exit status 1, never a traceback.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harmonia
from harmonia._cli.main import main
from harmonia.openai_compat import chat_request_to_conversation, render_chat_request

SRC = Path(harmonia.__file__).parent.parent


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    status = main(argv, stdout=out)
    return status, out.getvalue(), capsys.readouterr().err


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


# -- render: which format -----------------------------------------------------------

CHAT_WITHOUT_MODEL = {
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
}


def test_a_chat_request_without_model_is_read_as_chat(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "req.json", CHAT_WITHOUT_MODEL)
    status, out, err = run(["render", path, "--format", "ids"], capsys)
    assert status == 0
    assert json.loads(out) == render_chat_request(enc, CHAT_WITHOUT_MODEL)
    # the system text became developer instructions, as the Chat mapping says
    assert "<|start|>developer<|message|># Instructions\n\nBe brief." in enc.decode_utf8(
        json.loads(out)
    )
    assert err == (
        f"harmonia render: read {path} as a Chat Completions request (no harmony-only "
        "fields); --input-format harmony|chat chooses\n"
    )


def test_harmony_json_is_detected_and_the_choice_is_said(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = harmonia.Conversation.from_messages(
        [
            harmonia.Message.from_role_and_content(harmonia.Role.SYSTEM, "Be brief."),
            harmonia.Message.from_role_and_content(harmonia.Role.USER, "Hi"),
        ]
    )
    path = write(tmp_path, "conv.json", conv.to_json())
    status, out, err = run(["render", path, "--format", "ids"], capsys)
    assert status == 0
    assert json.loads(out) == enc.render_conversation_for_completion(conv, harmonia.Role.ASSISTANT)
    assert "as harmony JSON (messages[0].name: null)" in err


def test_input_format_option_overrides_detection(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "req.json", CHAT_WITHOUT_MODEL)
    status, out, err = run(
        ["render", path, "--input-format", "harmony", "--format", "text"], capsys
    )
    assert status == 0 and err == ""
    assert out == "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hi<|end|>" + (
        "<|start|>assistant\n"
    )


def test_detection_uses_format_only_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    harmony = {"messages": [{"role": "assistant", "channel": "final", "content": "x"}]}
    assert (
        "as harmony JSON (messages[0].channel)"
        in run(["render", write(tmp_path, "h.json", harmony)], capsys)[2]
    )
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "n": 1}
    assert (
        "as a Chat Completions request (field 'n')"
        in run(["render", write(tmp_path, "c.json", chat)], capsys)[2]
    )
    mixed = {
        "messages": [
            {"role": "assistant", "channel": "final", "content": "x"},
            {"role": "tool", "tool_call_id": "c", "content": "y"},
        ]
    }
    status, out, err = run(["render", write(tmp_path, "m.json", mixed)], capsys)
    assert (status, out) == (1, "")
    assert err == (
        "harmonia render: the JSON mixes harmony fields (messages[0].channel) and Chat request "
        "fields (messages[1].tool_call_id); give one format, or choose with --input-format\n"
    )


# -- render: one CoT default ----------------------------------------------------------

HISTORY = {
    "messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "reasoning_content": "Add them.", "content": "4"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "reasoning_content": "Need the tool.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ],
    "tools": [{"type": "function", "function": {"name": "w", "description": "Weather."}}],
}


def test_chat_requests_render_as_the_library_does(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "history.json", HISTORY)
    status, out, _ = run(["render", path, "--format", "ids"], capsys)
    assert status == 0 and json.loads(out) == render_chat_request(enc, HISTORY)
    # the request is one where the policies differ, so the test can fail
    reference = enc.render_conversation_for_completion(
        chat_request_to_conversation(HISTORY),
        harmonia.Role.ASSISTANT,
        harmonia.RenderConversationConfig(cot_policy="reference"),
    )
    assert json.loads(out) != reference
    status, out, _ = run(["render", path, "--format", "ids", "--cot-policy", "reference"], capsys)
    assert json.loads(out) == reference


# -- bad inputs: one line, status 1 ------------------------------------------------------

BAD_HARMONY = [
    (
        {"messages": [{"role": "wizard", "content": "x", "name": None}]},
        "messages[0].role: Unknown role: 'wizard' (use one of: user, assistant, system, "
        "developer, tool)",
    ),
    (
        {"messages": [{"role": "tool", "name": "functions.f", "channel": "commentary"}]},
        "messages[0] has no 'content' field: add one",
    ),
    (
        [
            {
                "role": "developer",
                "content": [
                    {
                        "type": "developer_content",
                        "tools": {"functions": {"name": "functions", "tools": [{"x": 1}]}},
                    }
                ],
            }
        ],
        "messages[0].content[0]: a tool has no 'name' field: add one",
    ),
    (
        [{"role": "system", "content": [{"type": "system_content", "reasoning_effort": "hgih"}]}],
        "messages[0].content[0]: reasoning_effort must be a ReasoningEffort or one of 'low', "
        "'medium', 'high', not 'hgih'",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD_HARMONY)
def test_bad_harmony_json_is_one_line(
    data: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "bad.json", data)
    status, out, err = run(["render", path, "--input-format", "harmony"], capsys)
    assert (status, out, err) == (1, "", f"harmonia render: {message}\n")


def test_reasoning_effort_in_any_case_renders_like_the_reference_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def rendered(effort: str) -> str:
        content = [{"type": "system_content", "reasoning_effort": effort}]
        path = write(tmp_path, f"{effort}.json", [{"role": "system", "content": content}])
        status, out, _ = run(["render", path, "--input-format", "harmony"], capsys)
        assert status == 0
        return out

    assert rendered("high") == rendered("HIGH") == rendered("High")


def test_bad_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"[1, 2, \xff\xfe\x00]")
    for command in ("render", "parse", "inspect"):
        status, out, err = run([command, str(binary)], capsys)
        assert (status, out) == (1, "")
        assert err == (
            f"harmonia {command}: {binary} is not UTF-8 text (byte 0xff at offset 7); "
            "give a UTF-8 text or JSON file\n"
        )
    status, _, err = run(["render", str(tmp_path / "missing.json")], capsys)
    assert status == 1
    assert (
        err
        == f"harmonia render: cannot read {tmp_path / 'missing.json'}: No such file or directory\n"
    )
    status, _, err = run(["render", write(tmp_path, "bad.json", '{"messages": [}')], capsys)
    assert status == 1
    assert err.endswith("bad.json is not JSON: Expecting value at line 1 column 15\n")
    status, _, err = run(["render", write(tmp_path, "n.json", "5")], capsys)
    assert err == "harmonia render: expected a JSON object with 'messages', not a JSON int\n"


def test_no_traceback_from_the_installed_command(tmp_path: Path) -> None:
    """The real entry point, in a fresh process: a bad file gives one line and status 1."""
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(128, 256)))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-m", "harmonia", "render", str(binary)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# -- parse: the default role and strict errors ------------------------------------------

MODEL_OUTPUT = "<|channel|>final<|message|>Hi.<|return|>"


def test_parse_reads_model_output_without_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for text in (MODEL_OUTPUT, "<|start|>assistant" + MODEL_OUTPUT):
        status, out, err = run(["parse", write(tmp_path, "out.txt", text)], capsys)
        assert (status, err) == (0, "")
        [message] = json.loads(out)["messages"]
        assert (message["role"], message["channel"], message["content"][0]["text"]) == (
            "assistant",
            "final",
            "Hi.",
        )
        assert "recipient" not in message


def test_strict_parse_errors_name_the_token_and_the_fix(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "out.txt", MODEL_OUTPUT)
    status, out, err = run(["parse", path, "--role", "none"], capsys)
    assert (status, out) == (1, "")
    assert err == (
        "harmonia parse: Unexpected token 200005 while expecting start token 200006 at token "
        "index 0 (id 200005 '<|channel|>'); if the input is model output after "
        "<|start|>assistant, use --role assistant; --lenient recovers and lists what it "
        "repaired\n"
    )
    ids = [*enc.encode(MODEL_OUTPUT, allowed_special="all"), 999_999]
    status, out, err = run(["parse", write(tmp_path, "out.ids", json.dumps(ids))], capsys)
    assert status == 1
    # The bad id is named, by its value and index, before parsing blames another token.
    assert f"token id 999999 at token index {len(ids) - 1} is out of range" in err
    assert "(o200k_harmony ids are 0..201088)" in err
    assert err.count("\n") == 1
    status, out, err = run(["parse", str(tmp_path / "out.ids"), "--lenient"], capsys)
    assert status == 0 and json.loads(out)["diagnostics"][0]["token_index"] == len(ids) - 1


def test_a_closed_pipe_ends_the_command_quietly(
    enc: harmonia.HarmonyEncoding, tmp_path: Path
) -> None:
    """``harmonia inspect big.ids | head -1``: no message, no traceback."""
    ids = enc.encode(MODEL_OUTPUT, allowed_special="all")
    path = tmp_path / "big.ids"
    path.write_text(" ".join(map(str, ids * 20_000)))  # far more than a pipe buffer
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harmonia", "inspect", str(path), "--color", "never"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"[0] assistant")
    proc.stdout.close()
    assert proc.wait(timeout=60) == 1
    assert proc.stderr.read() == b""
