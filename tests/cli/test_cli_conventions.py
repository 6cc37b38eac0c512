"""Command-line conventions: --version, help for every option, the demo, prompt ends."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import harmonia
from harmonia._cli.main import _build_parser, _HelpFormatter, main

ROOT = Path(__file__).parent.parent.parent


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"harmonia {harmonia.__version__}\n"


def _commands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    parser = parser or _build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _all_commands() -> dict[str, argparse.ArgumentParser]:
    """Every command and subcommand (``tools serve-mcp``), by its words."""
    out: dict[str, argparse.ArgumentParser] = {}
    todo = [((name,), p) for name, p in _commands().items()]
    while todo:
        words, parser = todo.pop()
        out[" ".join(words)] = parser
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            todo += [((*words, name), p) for name, p in _commands(parser).items()]
    return out


#: What only harmonia._options may call: every command and flag goes through it.
_ARGPARSE_CALLS = re.compile(
    r"\.(add_subparsers|add_parser|add_argument|add_argument_group|add_mutually_exclusive_group)\("
)


def argparse_calls(src: Path) -> list[str]:
    """``path:line call`` for each argparse registration outside ``_options.py``."""
    return [
        f"{path.relative_to(src)}:{n} {match.group(1)}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "_options.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in _ARGPARSE_CALLS.finditer(line)
    ]


def test_every_command_and_flag_is_declared_one_way(tmp_path: Path) -> None:
    # ``_options.Commands`` registers commands and ``_options`` adds every flag (from a
    # settings field or a standalone ``flag``): no other module calls argparse, so no
    # command can miss the layout every other one has, nor spell a shared flag again.
    assert argparse_calls(Path(harmonia.__file__).parent) == []
    # The guard sees a hand-written flag (as training/_cli.py had 32 before issue 32).
    (tmp_path / "_cli.py").write_text('    parser.add_argument("--color")\n', encoding="utf-8")
    (tmp_path / "_options.py").write_text("parser.add_argument('--x')\n", encoding="utf-8")
    assert argparse_calls(tmp_path) == ["_cli.py:1 add_argument"]


def test_every_command_is_registered_one_way() -> None:
    commands = _all_commands()
    assert {"chat", "serve", "data build", "tools serve-mcp", "tools browser find"} <= set(commands)
    for name, parser in commands.items():
        assert parser.formatter_class is _HelpFormatter, name
        assert parser.description, name
        assert parser.prog == f"harmonia {name}", name


def test_every_option_has_help_and_shows_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _all_commands()
    core = {"render", "schema", "parse", "inspect"}
    assert core <= set(commands)
    for name, parser in commands.items():
        assert main([*name.split(), "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
        for action in parser._actions:
            assert action.help, f"{name} {action.dest} has no help"
            shown = action.nargs != 0 and action.default not in (None, [], "==SUPPRESS==")
            if action.option_strings and shown:  # a switch's default is its absence
                assert f"(default: {action.default})" in text, (name, action.dest)
        if name in core:
            assert "exit status: 0 success; 1 an input was refused" in text
            assert "examples: harmonia render request.json --format text" in text
        else:  # the apps' commands show examples of their own
            assert "examples:" in text or any(
                isinstance(a, argparse._SubParsersAction) for a in parser._actions
            ), name


def test_top_level_help_lists_commands_examples_and_exit_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("render", "schema", "parse", "inspect", "--version", "exit status:"):
        assert command in text
    assert main(["render"]) == 2  # a usage error
    assert "the following arguments are required: file" in capsys.readouterr().err


def test_a_completion_prompt_end_is_not_a_truncated_message(
    enc: harmonia.HarmonyEncoding, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = harmonia.Conversation.from_messages(
        [harmonia.Message.from_role_and_content(harmonia.Role.USER, "Hi")]
    )
    prompt = enc.render_conversation_for_completion(conv, harmonia.Role.ASSISTANT)
    path = tmp_path / "prompt.ids"
    path.write_text(json.dumps(prompt))
    out = io.StringIO()
    assert main(["inspect", str(path), "--color", "never"], stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert lines == [
        "[0] user · 5 tokens from #0",
        "  ⟦<|start|>⟧user⟦<|message|>⟧Hi⟦<|end|>⟧",
        "[1] assistant · the prompt ends here: the model writes this message · 2 tokens from #5",
        "  ⟦<|start|>⟧assistant",
        "7 tokens, 1 message, 0 diagnostics",
    ]
    # a header cut anywhere else is still reported
    path.write_text(json.dumps(prompt + enc.encode("<|channel|>", allowed_special="all")))
    out = io.StringIO()
    assert main(["inspect", str(path), "--color", "never"], stdout=out) == 0
    assert out.getvalue().splitlines()[-1] == "8 tokens, 1 message, 1 diagnostic"


def test_the_demo_prints_commands_that_run_as_shown() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "examples" / "demo.py"), run_name="__main__")
    text = out.getvalue()
    commands = [line for line in text.splitlines() if line.startswith("$ ")]
    assert len(commands) == 2
    for command, tail in zip(
        commands, (" | harmonia inspect -", " | harmonia parse -"), strict=True
    ):
        # the input comes on stdin: no file the demo created and deleted
        assert command.startswith("$ echo ") and command.endswith(tail)
    assert "/tmp" not in text
    # make demo does not activate .venv: the demo says how to get the command
    assert "`. .venv/bin/activate`" in text and "`.venv/bin/harmonia`" in text


def test_the_readme_command_lines_run() -> None:
    """The README's ``echo ... | harmonia ...`` lines work as printed (exit 0)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [
        line.split("  #")[0]
        for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
        for line in block.splitlines()
        if line.startswith("echo ") and "| harmonia " in line
    ]
    assert len(lines) >= 2
    env = {**os.environ, "PYTHONPATH": str(Path(harmonia.__file__).parent.parent)}
    for line in lines:
        command = line.replace("| harmonia ", f"| {shlex.quote(sys.executable)} -m harmonia ")
        result = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60
        )
        assert result.returncode == 0, (line, result.stderr)
        assert result.stdout.strip(), line


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """What ``python -m harmonia ARGV`` writes to a pseudo-terminal."""
    import os
    import pty
    import sys

    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout is the terminal
        os.execve(sys.executable, [sys.executable, "-m", "harmonia", *argv], env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    return out.decode(errors="replace")


def test_color_auto_means_the_same_in_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``--color auto``: colour on a terminal unless NO_COLOR is set; ``inspect`` coloured
    # a terminal whatever NO_COLOR said while ``chat`` followed it (one rule now).
    from harmonia._options import use_color

    text = tmp_path / "out.txt"
    text.write_text("<|channel|>final<|message|>Hi<|return|>")
    src = str(Path(__file__).resolve().parents[2] / "src")
    base = {**os.environ, "PYTHONPATH": src, "TERM": "xterm"}
    base.pop("NO_COLOR", None)
    argv = ["inspect", "--text", "--progress", "none", str(text)]
    coloured = _on_a_terminal(argv, base)
    plain = _on_a_terminal(argv, {**base, "NO_COLOR": "1"})
    assert "\x1b[" in coloured and "Hi" in coloured
    assert "\x1b[" not in plain and "Hi" in plain

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty(), "auto") and not use_color(Tty(), "never")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty(), "auto") and use_color(Tty(), "always")
