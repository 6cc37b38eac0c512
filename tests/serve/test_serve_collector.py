"""``harmonia serve`` tunes the cyclic garbage collector once it has started (issue 34).

What start-up built is frozen (a full collection under load no longer walks
the vocabulary's tables) and the young generation is collected less often.
The CLI does it through ``Service.on_ready``, called once start-up succeeded,
before ``/health`` turns green; a start-up that fails never calls it.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from harmonia.engines import ScriptedEngine
from harmonia.serve import ServerConfig
from harmonia.serve._cli import GC_YOUNG_THRESHOLD, _tune_collector
from harmonia.serve._service import Service


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's collector as it was, afterwards."""
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_collector_is_tuned_once_started(collector: None) -> None:
    gc.unfreeze()
    older = gc.get_threshold()[1:]
    kept: list[object] = [object()]  # a tracked container that lives on
    assert any(obj is kept for obj in gc.get_objects())
    _tune_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *older)
    # Made before: frozen, in no generation a collection walks.
    assert all(obj is not kept for obj in gc.get_objects())


def test_on_ready_runs_once_when_start_up_succeeds() -> None:
    calls: list[bool] = []
    service = Service(ScriptedEngine([]), ServerConfig(warmup=False, store="none"))
    service.on_ready = lambda: calls.append(service.ready)
    asyncio.run(service.start())
    # Once, and before the service says it is ready (/health green).
    assert calls == [False] and service.ready


def test_on_ready_is_not_called_when_start_up_fails() -> None:
    class Broken(ScriptedEngine):
        async def max_sequences(self) -> int:  # asked when max_concurrent is not set
            raise RuntimeError("no")

    calls: list[bool] = []
    failed: list[bool] = []
    service = Service(Broken([]), ServerConfig(warmup=False, store="none", max_concurrent=None))
    service.on_ready = lambda: calls.append(True)
    service.on_start_failure = lambda: failed.append(True)
    asyncio.run(service.start())
    assert failed == [True] and calls == [] and not service.ready
