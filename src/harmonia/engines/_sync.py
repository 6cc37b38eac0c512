"""A blocking face for any async engine: a private event loop on a daemon thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from harmonia import InputError

from ._base import Completion, Constraint, Engine, Finish, SamplingParams, TokenLogprob
from ._generation import Generation

T = TypeVar("T")


class SyncEngine:
    """Drive an async :class:`~harmonia.engines.Engine` from synchronous code.

    The engine runs on a private event loop in a daemon thread; calls block
    until their result is there.

    >>> from harmonia.engines import ScriptedEngine
    >>> with SyncEngine(ScriptedEngine([[5, 6, 200012]])) as engine:
    ...     generation = engine.generate([1, 2, 3])
    ...     ids = [token for chunk in generation for token in chunk]
    ...     print(ids, generation.finish.reason.value, generation.finish.stop_token)
    [5, 6, 200012] stop 200012
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"harmonia-{engine.name}-loop", daemon=True
        )
        self._thread.start()
        self._closed = False

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed and not self._loop.is_running():
            coroutine.close()
            raise InputError(f"this SyncEngine ({self.engine.name}) is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> SyncGeneration:
        """Start a generation; iterate the result for chunks of ids."""

        async def start() -> Generation:
            return self.engine.generate(prompt, params, constraint=constraint)

        return SyncGeneration(self._call(start()), self)

    def close(self) -> None:
        """Close the engine and stop the private loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.engine.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> SyncEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SyncGeneration:
    """The blocking twin of :class:`~harmonia.engines.Generation`."""

    def __init__(self, generation: Generation, driver: SyncEngine) -> None:
        self.generation = generation
        self._driver = driver

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        while True:
            try:
                yield self._driver._call(self.generation.__anext__())
            except StopAsyncIteration:
                return

    @property
    def tokens(self) -> tuple[int, ...]:
        """Every id sampled so far."""
        return self.generation.tokens

    @property
    def logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """Every id's log-probability, parallel to :attr:`tokens` (``None``: not asked for)."""
        return self.generation.logprobs

    @property
    def last_logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """The log-probabilities of the chunk the iteration gave last."""
        return self.generation.last_logprobs

    @property
    def finish(self) -> Finish | None:
        """Why it ended; ``None`` while it runs."""
        return self.generation.finish

    def cancel(self) -> None:
        """Stop the generation and wait until the engine has stopped."""
        self._driver._call(self.generation.cancel())

    def result(self) -> Completion:
        """Block until the end; every id, the finish and the usage."""
        return self._driver._call(self.generation.result())

    def __enter__(self) -> SyncGeneration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Cancel on the way out, so a ``break`` stops the engine."""
        self.cancel()
