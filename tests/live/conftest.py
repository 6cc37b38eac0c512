"""Fixtures of the live suite: one real server of each kind per session (see live_support)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_support import SERVED_NAME, LiveServer, start_llama, start_vllm

pytest.importorskip("httpx", reason="httpx is not installed (harmonia[engines-http])")

_servers: dict[str, LiveServer | str] = {}
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Opt-in: the servers take minutes to start (and gigabytes to build), so a plain
    # `make test` lists these as skipped with the way to run them; CI runs them as a
    # step of their own (tools/live/ci.sh, HARMONIA_LIVE=require).
    if os.environ.get("HARMONIA_LIVE") in ("1", "require"):
        return
    marker = pytest.mark.skip(
        reason="the live suite runs with HARMONIA_LIVE=1 (or `bash tools/live/ci.sh`, "
        "which builds the real servers into ~/.cache/harmonia-live first)"
    )
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(marker)


def _server(kind: str) -> LiveServer:
    """The session's server of ``kind``, started on first use (a failed start is remembered)."""
    found = _servers.get(kind)
    if isinstance(found, str):
        pytest.fail(found, pytrace=False)
    if found is None:
        try:
            found = start_llama() if kind == "llama.cpp" else start_vllm()
        except RuntimeError as exc:
            _servers[kind] = f"{kind} did not start: {exc}"
            raise
        _servers[kind] = found
    return found


@pytest.fixture(scope="session", autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    for server in _servers.values():
        if isinstance(server, LiveServer):
            server.stop()


@pytest.fixture(params=["llama.cpp", "vllm"], scope="session")
def live(request: pytest.FixtureRequest) -> LiveServer:
    """Each live server in turn."""
    return _server(request.param)


@pytest.fixture(scope="session")
def llama_live() -> LiveServer:
    """The llama-server alone, for the checks of what only the llama.cpp engine does."""
    return _server("llama.cpp")


@pytest.fixture
def make_engine(live: LiveServer) -> Any:
    """A fresh harmonia engine for the live server (closed by the test's own loop)."""

    def make() -> Any:
        if live.name == "llama.cpp":
            from harmonia.engines.llamacpp import LlamaCppEngine

            return LlamaCppEngine(live.url)
        from harmonia.engines.vllm import VLLMEngine

        return VLLMEngine(live.url, model=SERVED_NAME)

    return make
