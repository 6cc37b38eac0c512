"""The engine and tool flags come from ``EngineSpec`` and ``ToolsSpec``, in every command.

A field added to a spec appears in each command that builds an engine or tools,
with no other edit; the same flag means the same thing, with the same default, in
every command; ``chat`` and ``serve`` read the same argv into the same specs; and
docs/cli.md's table lists every flag.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from cli_support import all_parsers, options

from harmonia._options import add_options, flag_of, from_args, option
from harmonia.engines import EngineSpec
from harmonia.tools import ToolsSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

ENGINE_COMMANDS = ["chat", "serve"]
TOOLS_COMMANDS = [
    "chat",
    "serve",
    "tools browser search",
    "tools browser open",
    "tools browser find",
    "tools python",
    "tools serve-mcp",
]


def parse(command: str, argv: list[str]) -> argparse.Namespace:
    return all_parsers()[command].parse_args(argv)


def with_new_field(monkeypatch: pytest.MonkeyPatch, cls: type) -> str:
    """Give ``cls`` one more option field, as a new setting would be written; its flag."""
    extended = dataclasses.make_dataclass(
        cls.__name__,
        [("new_knob", "str | None", option(None, help="a setting added in one place"))],
        bases=(cls,),
        frozen=True,
    )
    monkeypatch.setattr(cls, "__dataclass_fields__", extended.__dataclass_fields__)
    monkeypatch.setattr(cls, "__annotations__", {**cls.__annotations__, "new_knob": "str | None"})
    return "--new-knob"


@pytest.mark.parametrize(
    ("spec", "command"),
    [(EngineSpec, c) for c in ENGINE_COMMANDS] + [(ToolsSpec, c) for c in TOOLS_COMMANDS],
)
def test_a_field_added_to_a_spec_appears_in_each_command(
    spec: type, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "--new-knob" not in options(all_parsers()[command])
    flag = with_new_field(monkeypatch, spec)
    assert options(all_parsers()[command])[flag].dest == "new_knob"
    if spec is EngineSpec:  # these commands build an engine from these flags alone
        parsed = parse(command, ["--engine", "scripted", flag, "on"])
        assert parsed.new_knob == "on"


SAME_ARGV = [
    ["--engine", "vllm", "--url", "http://127.0.0.1:8001", "--engine-model", "gpt-oss-20b"],
    ["--engine", "transformers", "--engine-model", "./gpt-oss-20b", "--device", "cuda"],
    ["--engine", "llama.cpp", "--url", "http://h:1", "--json-args", "any"],
    ["--engine", "scripted", "--script", "r.json", "--script-delay", "0.5"],
    ["--engine", "random", "--browser", "you", "--python"],
    ["--engine", "scripted", "--browser", "docs/", "--browser-index", "i.sqlite"],
]


@pytest.mark.parametrize("argv", SAME_ARGV)
def test_chat_and_serve_read_the_same_argv_into_the_same_specs(argv: list[str]) -> None:
    chat, serve = parse("chat", argv), parse("serve", argv)
    assert from_args(EngineSpec, chat) == from_args(EngineSpec, serve)
    assert from_args(ToolsSpec, chat) == from_args(ToolsSpec, serve)


def test_the_drifted_spellings_are_gone(capsys: pytest.CaptureFixture[str]) -> None:
    # Once: chat --model, serve --model-path for the engine's model; tools browser
    # --corpus / --web for --browser, --database for --browser-index. One spelling now.
    for command in ENGINE_COMMANDS:
        parsed = parse(command, ["--engine", "transformers", "--engine-model", "d"])
        assert from_args(EngineSpec, parsed).engine_model == "d"
        with pytest.raises(SystemExit):
            parse(command, ["--engine", "transformers", "--model-path", "d"])
    with pytest.raises(SystemExit):
        parse("chat", ["--engine", "transformers", "--model", "d"])
    # serve's --model is the name it serves, not the engine's.
    assert parse("serve", ["--engine", "scripted", "--model", "m"]).model == "m"
    for old, value in (("--corpus", "docs/"), ("--web", "exa"), ("--database", "i.sqlite")):
        with pytest.raises(SystemExit):
            parse("tools browser search", ["q", old, value])
        assert "unrecognized arguments" in capsys.readouterr().err


def test_a_flag_means_the_same_and_defaults_alike_in_every_command() -> None:
    # On main --device defaulted to cpu in chat and to nothing in serve, and --url,
    # --browser and --timeout were described differently in each command.
    seen: dict[str, tuple[Any, ...]] = {}
    where: dict[str, list[str]] = {}
    spec_flags = {
        flag_of(cls, f.name) for cls in (EngineSpec, ToolsSpec) for f in dataclasses.fields(cls)
    }
    for words, parser in all_parsers().items():
        given = options(parser)
        for flag, action in given.items():
            # tools browser find's --url is the page to search in: no engine there.
            if flag not in spec_flags or (flag == "--url" and "--engine" not in given):
                continue
            what = (action.dest, action.default, action.choices, action.help, action.required)
            assert seen.setdefault(flag, what) == what, (flag, words, where[flag])
            where.setdefault(flag, []).append(words)
    assert set(where["--engine"]) == set(ENGINE_COMMANDS)
    assert set(where["--browser"]) >= {"chat", "serve", "tools browser search", "tools serve-mcp"}
    assert set(where["--timeout"]) == {"tools python", "tools serve-mcp"}


def test_the_vllm_url_is_required_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    from harmonia._cli.main import main

    for command in ENGINE_COMMANDS:
        extra = ["--prompt", "hi"] if command == "chat" else []
        assert main([command, "--engine", "vllm", *extra]) == 1
        err = capsys.readouterr().err
        assert "--engine vllm needs --url" in err and "Traceback" not in err, command


def test_generated_options_follow_the_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class Spec:
        kind: str = option(help="required: no default")
        count: int = option(3, help="a number")
        rate: float | None = option(None, help="maybe a number", flag="--speed")
        on: bool = option(False, help="a switch", scope=("x",))

    parser = argparse.ArgumentParser()
    add_options(parser, Spec, scope=("y",))
    assert "--on" not in options(parser)  # out of scope
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --kind is required
    parsed = parser.parse_args(["--kind", "k", "--count", "4", "--speed", "0.5"])
    assert from_args(Spec, parsed) == Spec("k", 4, 0.5)


def test_docs_cli_lists_every_engine_and_tool_flag() -> None:
    table = DOC.read_text(encoding="utf-8").split("## Shared flags", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    listed = set(re.findall(r"--[a-z][a-z-]*", " ".join(rows)))
    for cls in (EngineSpec, ToolsSpec):
        for field in dataclasses.fields(cls):
            assert flag_of(cls, field.name) in listed, (cls.__name__, field.name)
    words = " ".join(table.splitlines())
    assert "--browser DIR\\|exa\\|you" in words  # on main it said DIR|exa


# -- one toolbox builder for chat and serve (issue 32 item 3) ------------------------------


def test_a_missing_sandbox_is_the_same_start_up_error_in_chat_and_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import harmonia.tools.python as python_tool
    from harmonia import InputError
    from harmonia.serve._cli import build_tool_loop
    from harmonia.tools.python import SandboxStatus

    broken = SandboxStatus(ok=False, reason="bwrap: no user namespaces")
    monkeypatch.setattr(python_tool, "sandbox_status", lambda config=None: broken)
    errors = []
    for command in ENGINE_COMMANDS:
        args = parse(command, ["--engine", "scripted", "--python"])
        with pytest.raises(InputError) as caught:
            if command == "serve":
                build_tool_loop(args)  # on main: a warning, and the server started
            else:
                from_args(ToolsSpec, args).build()
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert "bwrap: no user namespaces" in errors[0] and "leave out --python" in errors[0]


def test_chat_and_serve_index_the_browser_folder_at_start_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harmonia.serve._cli import build_tool_loop
    from harmonia.tools.browser import LocalCorpusBackend

    (tmp_path / "tides.md").write_text("# Tides\n\nHigh water twice a day.\n", encoding="utf-8")
    indexed: list[str] = []
    real = LocalCorpusBackend.index
    monkeypatch.setattr(LocalCorpusBackend, "index", lambda self: indexed.append("x") or real(self))
    for command in ENGINE_COMMANDS:
        args = parse(command, ["--engine", "scripted", "--browser", str(tmp_path)])
        if command == "serve":
            loop, backend = build_tool_loop(args)
            assert loop is not None and backend is not None
            backend.close()
        else:
            asyncio.run(from_args(ToolsSpec, args).build().aclose())
        assert len(indexed) == ENGINE_COMMANDS.index(command) + 1, command


def test_serve_builds_each_response_s_tools_with_the_spec() -> None:
    # On main serve built PythonTool() itself, ignoring the settings.
    from harmonia.serve import AgentToolLoop

    loop = AgentToolLoop(python=True, tools=ToolsSpec(python=True, timeout=7.0))
    box, browser = loop._toolbox(["code_interpreter", "function"])
    try:
        python = box.tool("python")
        assert python is not None and python.config.timeout == 7.0  # type: ignore[attr-defined]
        assert browser is None and "functions" in box.namespaces
    finally:
        asyncio.run(box.aclose())
