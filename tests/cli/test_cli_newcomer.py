"""What a new user runs into first, through the real ``harmonia`` executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def harmonia(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harmonia", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=300,  # a hang guard
    )


def test_parse_reads_a_file_an_editor_saved(tmp_path: Path) -> None:
    for ending in ("\n", "\r\n"):
        path = tmp_path / "completion.txt"
        path.write_bytes(f"<|channel|>final<|message|>Hi<|return|>{ending}".encode())
        result = harmonia("parse", str(path))
        assert result.returncode == 0, result.stderr
        [message] = json.loads(result.stdout)["messages"]
        assert message["content"][0]["text"] == "Hi"
    # The same text from standard input reads the same.
    piped = harmonia("parse", "-", stdin="<|channel|>final<|message|>Hi<|return|>\n")
    assert piped.returncode == 0 and piped.stdout == result.stdout


def test_parse_ids_names_the_id_out_of_range() -> None:
    result = harmonia("parse", "--ids", "-", stdin="1 2 999999999")
    assert result.returncode == 1
    assert "token id 999999999 at token index 2 is out of range" in result.stderr
    lenient = harmonia("parse", "--ids", "-", "--lenient", stdin="1 2 999999999")
    assert lenient.returncode == 0


def test_strict_parse_of_a_truncated_tool_call_says_it_is_truncated() -> None:
    cut = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": '
    result = harmonia("parse", "-", stdin=cut)
    assert result.returncode == 0  # as the reference: the message as it is
    assert "a tool call to functions.f is truncated" in result.stderr
    whole = harmonia("parse", "-", stdin=cut + "1}<|call|>")
    assert whole.returncode == 0 and whole.stderr == ""


def test_cli_errors_name_the_flag_not_the_keyword() -> None:
    text = "<|start|>assistant<|channel|>final<|message|>x<|end|><|start|>user<|message|>y<|end|>"
    result = harmonia("parse", "--role", "assistant", "-", stdin=text)
    assert result.returncode == 1 and "--lenient" in result.stderr
    assert "strict=False" not in result.stderr


def test_inspect_of_a_conversation_points_to_render(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"}]}))
    for command in ("inspect", "parse"):
        result = harmonia(command, str(path))
        assert result.returncode == 1
        assert f"harmonia render {path}" in result.stderr and "not model output" in result.stderr
    assert harmonia("inspect", str(path), "--text", "--color", "never").returncode == 0


def test_schema_refuses_what_the_renderer_refuses() -> None:
    result = harmonia("schema", "-", stdin='{"type": "objekt"}')
    assert result.returncode == 1 and result.stdout == ""
    assert "'objekt', not a JSON Schema type" in result.stderr
    good = harmonia("schema", "-", stdin='{"type": "object"}')
    assert good.returncode == 0


def test_a_chat_user_message_without_content_is_refused() -> None:
    for message in ({"role": "user"}, {"role": "user", "content": None}):
        result = harmonia("render", "-", stdin=json.dumps({"messages": [message]}))
        assert result.returncode == 1
        assert "a user message needs content" in result.stderr
        assert "messages[0].content" in result.stderr


def _run_without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``harmonia argv`` in a Python where ``module`` cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from harmonia._cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=300,
    )


def test_serve_mcp_without_its_extra_says_how_to_install_it() -> None:
    from harmonia._errors import _install_hint as install_hint  # uncached: this cwd

    result = _run_without("mcp", "tools", "serve-mcp", "browser", "--browser", ".")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "harmonia tools serve-mcp: harmonia tools serve-mcp needs the mcp extra "
        f"(mcp is missing): {install_hint('mcp')}"
    )


def test_the_version_and_the_format_commands_do_not_load_the_apps() -> None:
    # What `harmonia --version` costs is what it imports: not agent, training or serve.
    code = (
        "import sys\n"
        "from harmonia._cli.main import main\n"
        "main(sys.argv[1:])\n"
        "apps = ('harmonia.agent', 'harmonia.training', 'harmonia.serve', 'harmonia.tools')\n"
        "print(sorted(m for m in sys.modules if m.startswith(apps)))\n"
    )
    for argv in (["--version"], ["--help"], ["schema", "-"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *argv],
            input='{"type": "string"}',
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
            timeout=300,
        )
        assert result.stdout.splitlines()[-1] == "[]", (argv, result.stdout, result.stderr)
    # Each app's command still loads its own module, and only that one.
    result = subprocess.run(
        [sys.executable, "-c", code, "data", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=300,
    )
    loaded = result.stdout.splitlines()[-1]
    assert "harmonia.training._cli" in loaded and "harmonia.serve" not in loaded
