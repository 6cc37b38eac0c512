"""``harmonia chat``: through main(argv) and through a pseudo-terminal, as a person uses it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harmonia import Conversation
from harmonia._options import Commands
from harmonia.agent._chat_cli import add_subcommand, main

SRC = Path(__file__).resolve().parents[2] / "src"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

SEARCH = (
    "<|channel|>analysis<|message|>Let me search the corpus.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.search code<|message|>"
    '{"query": "lunar day"}<|call|>'
)
OPEN = '<|channel|>analysis to=browser.open code<|message|>{"id": 0}<|call|>'
ANSWER = (
    "<|channel|>final<|message|>A lunar day lasts 24 hours and 50 minutes【1†L6-L7】.<|return|>"
)


def _script(tmp_path: Path, items: list[Any]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    return str(path)


def test_prompt_json_is_valid_json_with_messages_and_usage(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, [SEARCH, OPEN, ANSWER])
    saved = tmp_path / "chat.json"
    out = io.StringIO()
    argv = ["--engine", "scripted", "--script", script, "--browser", str(corpus)]
    argv += ["--prompt", "How long is a lunar day?", "--json", "--save", str(saved)]
    assert main(argv, stdout=out) == 0
    data = json.loads(out.getvalue())
    assert data["stop_reason"] == "final"
    assert data["answer"] == "A lunar day lasts 24 hours and 50 minutes【1†L6-L7】."
    assert data["steps"] == 3
    usage = data["usage"]
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > usage["completion_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    authors = [(m["role"], m.get("name")) for m in data["messages"]]
    assert authors == [
        ("assistant", None),
        ("assistant", None),
        ("tool", "browser.search"),
        ("assistant", None),
        ("tool", "browser.open"),
        ("assistant", None),
    ]
    assert "24 hours and 50 minutes" in data["messages"][4]["content"][0]["text"]
    # The saved conversation is harmony JSON that loads back, and a chat can go on from it.
    loaded = Conversation.from_json(saved.read_text(encoding="utf-8"))
    assert loaded.to_dict() == data["conversation"]
    follow = _script(tmp_path, ["<|channel|>final<|message|>You are welcome.<|return|>"])
    out = io.StringIO()
    argv = ["--engine", "scripted", "--script", follow, "--load", str(saved)]
    assert main([*argv, "--prompt", "Thanks!", "--json"], stdout=out) == 0
    again = json.loads(out.getvalue())
    assert len(again["conversation"]["messages"]) == len(loaded.messages) + 2
    assert capsys.readouterr().err == ""


def test_errors_are_plain_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on port 9 of the loopback: the engine cannot connect.
    out = io.StringIO()
    argv = ["--engine", "llama.cpp", "--url", "http://127.0.0.1:9", "--prompt", "hi"]
    assert main(argv, stdout=out) == 1
    text = out.getvalue()
    assert "http://127.0.0.1:9" in text and "check that the server is running" in text
    assert main(["--engine", "vllm", "--prompt", "hi"], stdout=io.StringIO()) == 1
    assert "--engine vllm needs --url" in capsys.readouterr().err
    assert main(["--engine", "scripted", "--json"], stdout=io.StringIO()) == 2
    assert "--json needs --prompt" in capsys.readouterr().err
    missing = ["--engine", "scripted", "--script", "x", "--browser", str(tmp_path / "nope")]
    assert main([*missing, "--prompt", "hi"], stdout=io.StringIO()) == 1
    assert "not a folder" in capsys.readouterr().err


def test_add_subcommand_registers_chat_on_a_parent_command() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="harmonia")
    add_subcommand(Commands(parser))
    args = parser.parse_args(["chat", "--engine", "vllm", "--python"])
    assert args.command == "chat" and args.python and callable(args.func)


# -- the pseudo-terminal ---------------------------------------------------------------


class Terminal:
    """A child process on a pseudo-terminal: type into it, read what it shows."""

    def __init__(self, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(SRC), "NO_COLOR": "", "TERM": "xterm"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: its controlling terminal is the pty, so Ctrl-C is SIGINT
            os.execve(sys.executable, [sys.executable, "-m", "harmonia.agent", *argv], env)
        self.pid, self.fd = pid, fd
        self.seen = ""

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, pattern: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, ANSI.sub("", self.seen)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} not shown within {timeout} s:\n{self.seen}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{pattern!r} never shown; the chat ended:\n{self.seen}")
                self.seen += chunk.decode(errors="replace")
        return ANSI.sub("", self.seen)

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, reading what the child still writes (a full pty would block it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):  # the child closed the terminal
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"the chat did not exit:\n{self.seen}")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


@pytest.fixture
def terminal() -> Iterator[Any]:
    opened: list[Terminal] = []

    def start(argv: list[str]) -> Terminal:
        opened.append(Terminal(argv))
        return opened[-1]

    yield start
    for t in opened:
        t.close()


def test_a_scripted_session_in_a_terminal(tmp_path: Path, corpus: Path, terminal: Any) -> None:
    answer = {"text": ANSWER, "delay": 0.01}
    script = _script(tmp_path, [SEARCH, OPEN, answer])
    term = terminal(["--engine", "scripted", "--script", script, "--browser", str(corpus)])
    term.expect("scripted engine: .*the model's words are replayed, the tools are real")
    term.expect("> ")
    term.type("How long is a lunar day?\n")
    shown = term.expect(r"\[final: \d+ prompt \+ \d+ completion tokens, 3 steps\]")
    assert "thinking: Let me search the corpus." in shown
    assert '→ browser.search {"query": "lunar day"}' in shown
    # The real corpus results: the search, then the page it opened.
    assert "← browser.search" in shown and "【0†Tides】" in shown and "【1†The Moon】" in shown
    assert "← browser.open" in shown and "L6: lunar day. A lunar day lasts 24 hours" in shown
    # The answer streamed, with its citation turned into a link to the corpus file.
    link = r"\(\[Tides\]\(file://\S*/corpus/tides\.md\)\)"
    assert re.search("answer: A lunar day lasts 24 hours and 50 minutes " + link, shown)
    term.expect("> ")
    term.type("/exit\n")
    assert term.wait() == 0


def test_ctrl_c_stops_the_answer_not_the_chat(tmp_path: Path, terminal: Any) -> None:
    slow = {"text": "<|channel|>final<|message|>" + "word " * 400 + "<|return|>", "delay": 0.02}
    quick = "<|channel|>final<|message|>Still here.<|return|>"
    script = _script(tmp_path, [slow, quick])
    term = terminal(["--engine", "scripted", "--script", script])
    term.expect("> ")
    term.type("talk\n")
    term.expect("answer: word word word")
    term.type("\x03")  # Ctrl-C
    shown = term.expect(r"\[cancelled: .*\]")
    assert shown.count("word") < 400
    term.expect("> $")
    term.type("are you there?\n")
    term.expect(r"answer: Still here\.")
    term.type("\x04")  # Ctrl-D leaves
    assert term.wait() == 0


def test_ctrl_c_at_the_prompt_leaves_with_130(terminal: Any) -> None:
    """docs/cli.md: at the prompt Ctrl-C leaves (130), without waiting for Enter."""
    term = terminal(["--engine", "scripted"])
    term.expect("> ")
    term.type("\x03")  # Ctrl-C, and no Enter after it
    assert term.wait() == 130
    assert "harmonia chat: interrupted" in term.seen


def test_functions_from_a_python_file(tmp_path: Path) -> None:
    module = tmp_path / "mytools.py"
    module.write_text(
        "from harmonia.tools import function_tool\n\n\n"
        "@function_tool\n"
        "def add(a: int, b: int) -> int:\n"
        '    """Adds two numbers."""\n'
        "    return a + b\n",
        encoding="utf-8",
    )
    call = (
        "<|channel|>commentary to=functions.add <|constrain|>json"
        '<|message|>{"a": 2, "b": 40}<|call|>'
    )
    script = _script(tmp_path, [call, "<|channel|>final<|message|>42<|return|>"])
    out = io.StringIO()
    argv = ["--engine", "scripted", "--script", script, "--functions", str(module)]
    assert main([*argv, "--prompt", "2 + 40?", "--json"], stdout=out) == 0
    data = json.loads(out.getvalue())
    reply = data["messages"][1]
    assert (reply["name"], reply["content"][0]["text"]) == ("functions.add", "42")
    # The function is declared in the developer message the model read.
    developer = data["conversation"]["messages"][1]
    tools = developer["content"][0]["tools"]["functions"]["tools"]
    assert developer["role"] == "developer" and [t["name"] for t in tools] == ["add"]
