"""Fixtures of the serve tests (the helpers they use are in serve_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="harmonia[serve] (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="harmonia[serve] (uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai client (dev extra) is not installed")

from serve_support import Book, Server, start_server


@pytest.fixture(scope="session")
def shared_server() -> Iterator[Server]:
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def srv(shared_server: Server) -> Iterator[Server]:
    """The shared server with an empty script queue."""
    shared_server.book.queue.clear()
    yield shared_server
    shared_server.book.queue.clear()


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    """Start a server with its own config; stopped after the test."""
    started: list[Server] = []

    def make(engine_factory: Callable[[Book], Any] | None = None, **config: Any) -> Server:
        server = start_server(engine_factory, **config)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
