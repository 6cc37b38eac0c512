"""``--engine random``: chat and serve without a model (the tests' random-weight gpt-oss)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}


def test_chat_with_the_random_engine_runs_the_real_decode_path() -> None:
    pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    argv = ["chat", "--engine", "random", "--prompt", "Hi", "--json", "--max-tokens", "4"]
    result = subprocess.run(
        [sys.executable, "-m", "harmonia", *argv],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,  # a hang guard
    )
    data = json.loads(result.stdout)
    assert data["usage"]["completion_tokens"] == 4  # sampled, and bounded by --max-tokens
    assert data["stop_reason"] == "max_tokens"


def test_without_torch_the_random_engine_says_how_to_install_it() -> None:
    from harmonia._errors import _install_hint as install_hint  # uncached: this cwd

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from harmonia._cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "chat", "--engine", "random", "--prompt", "Hi"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert install_hint("transformers") in result.stderr


def test_serve_builds_the_random_engine() -> None:
    pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    pytest.importorskip("transformers", reason="transformers is not installed")
    from harmonia._options import from_args
    from harmonia.engines import EngineSpec
    from harmonia.engines.transformers import TransformersEngine
    from harmonia.serve._cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    engine = from_args(EngineSpec, parser.parse_args(["--engine", "random"])).build()
    assert isinstance(engine, TransformersEngine)
    assert engine.model.config.vocab_size == 201_088
