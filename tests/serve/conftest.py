"""Fixtures of the serve tests (the helpers they use are in serve_support.py).

A test that takes ``srv`` (or another fixture built on ``engine_kind``) runs
once per engine in ``serve_support.ENGINES``: on the scripted engine and on
the real transformers engine teacher-forced to the same script under the
server's own constraint. ``@pytest.mark.scripted_only("why")`` keeps a test
on the scripted engine: only for what a real model cannot be made to do on
cue (a stall, a failure mid-stream), and ``why`` says which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="harmonia[serve] (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="harmonia[serve] (uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai client (dev extra) is not installed")

from serve_support import (
    ENGINES,
    SDK_TYPE_ERRORS,
    Book,
    Server,
    engine_factory,
    start_server,
    with_empty_queue,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "scripted_only(why): run on the scripted engine only, because of the fault it injects",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_kind" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("scripted_only")
    if marker is not None and not marker.args:
        raise pytest.UsageError(f"{metafunc.function.__name__}: scripted_only needs a reason")
    kinds = ["scripted"] if marker is not None else list(ENGINES)
    # Session scope: pytest groups the tests by engine, so each server starts once.
    metafunc.parametrize("engine_kind", kinds, indirect=True, scope="session")


@pytest.fixture(autouse=True)
def sdk_types_checked() -> Iterator[None]:
    """Fail a test whose clients received a body the SDK's types refuse."""
    SDK_TYPE_ERRORS.clear()
    yield
    assert not SDK_TYPE_ERRORS, SDK_TYPE_ERRORS


@pytest.fixture(scope="session")
def engine_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def random_model() -> Any:
    """One random gpt-oss for the whole session (the servers only read it)."""
    pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    from harmonia.engines.transformers import random_gpt_oss

    return random_gpt_oss(seed=0)


@pytest.fixture(scope="session")
def make_engine(engine_kind: str, request: pytest.FixtureRequest) -> Callable[[Book], Any]:
    """The engine factory of this test's engine kind."""
    if engine_kind == "scripted":
        return engine_factory(engine_kind)
    return engine_factory(engine_kind, request.getfixturevalue("random_model"))


@pytest.fixture(scope="session")
def shared_server(make_engine: Callable[[Book], Any]) -> Iterator[Server]:
    server = start_server(make_engine)
    yield server
    server.stop()


@pytest.fixture
def srv(shared_server: Server) -> Iterator[Server]:
    """The shared server of this test's engine, with an empty script queue."""
    yield from with_empty_queue(shared_server)


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    """Start a server (scripted engine unless a factory is given); stopped after the test."""
    started: list[Server] = []

    def make(engine_factory: Callable[[Book], Any] | None = None, **config: Any) -> Server:
        server = start_server(engine_factory, **config)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
