"""The handle of one running generation: iterate its ids, read why it ended, cancel it.

An engine describes a generation as a *producer*: a coroutine that calls
``emit(ids)`` as ids come and returns a :class:`Finish` when the engine says
the generation is over. :class:`Generation` runs it as an asyncio task and does
the bookkeeping every engine needs the same way, in one place:

* stop ids and ``max_tokens`` are enforced on what is emitted (``emit`` cuts
  the chunk and ends the producer), so a server that overshoots is still cut
  at the right id;
* cancelling cancels the producer task, which closes its stream or tells its
  worker thread to stop, and waits until it has;
* an :class:`~harmonia.EngineError` from the producer ends the generation with
  :attr:`FinishReason.ERROR` and is raised to whoever iterates; any other
  exception is wrapped into one (an engine bug must not look like a clean stop);
* when log-probabilities were asked for (``SamplingParams.top_logprobs``),
  every emitted id must come with its :class:`TokenLogprob` (``emit(ids,
  logprobs)``, one per id, for that id): an engine that loses one fails the
  generation rather than letting the two lists drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Protocol

from harmonia import EngineError, InputError

from ._base import (
    Completion,
    Constraint,
    Finish,
    FinishReason,
    SamplingParams,
    TokenLogprob,
    Usage,
    check_prompt,
)


class Emit(Protocol):
    """What a producer calls with each new chunk of ids (on the event loop's thread).

    ``logprobs``, one :class:`TokenLogprob` per id, is required when the
    generation's parameters ask for log-probabilities and ignored otherwise.
    """

    def __call__(
        self, ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None = None, /
    ) -> None: ...


#: An engine's generation: emits ids, returns why it ended.
Producer = Callable[[Emit], Awaitable[Finish]]


class _Chunk:
    """One emitted chunk on its way to the consumer: ids and, if asked for, their logprobs."""

    __slots__ = ("ids", "logprobs")

    def __init__(self, ids: tuple[int, ...], logprobs: tuple[TokenLogprob, ...] | None) -> None:
        self.ids = ids
        self.logprobs = logprobs


class _Ended(Exception):
    """Raised out of ``emit`` to end the producer at a stop id or the length limit."""

    def __init__(self, finish: Finish) -> None:
        super().__init__(finish.reason.value)
        self.finish = finish


class Generation:
    """One generation in progress; iterate it for chunks of sampled ids.

    ::

        generation = engine.generate(prompt, SamplingParams(max_tokens=256))
        async for ids in generation:      # tuples of ids, as they come
            ...
        generation.finish                 # Finish(reason=FinishReason.STOP, stop_token=200002)

    Each step of the iteration gives every id that arrived since the previous
    one (at least one). The stop token that ended the generation is yielded
    too: harmony's parser needs it. Iteration ends quietly on a stop id, the
    length limit or :meth:`cancel`, and raises :class:`~harmonia.EngineError`
    when the engine failed. Use it as an async context manager to cancel it on
    the way out (a ``break`` then stops the engine). One consumer at a time.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        engine: str,
        prompt_tokens: int,
        params: SamplingParams,
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise InputError(
                f"{engine}: generate() needs a running event loop; from synchronous code "
                "use harmonia.engines.SyncEngine"
            ) from None
        self.engine = engine
        self.params = params
        self.prompt_tokens = prompt_tokens
        self._tokens: list[int] = []
        self._want_logprobs = params.logprobs
        self._logprobs: list[TokenLogprob] = []
        self._last_logprobs: tuple[TokenLogprob, ...] | None = None
        self._stops = frozenset(params.stop_token_ids)
        self._queue: asyncio.Queue[_Chunk | None] = asyncio.Queue()
        self._finish: Finish | None = None
        self._ended: Finish | None = None  # set by emit at a stop id or the limit
        self._error: EngineError | None = None
        self._cancelling = False
        self._follower: Callable[[tuple[int, ...]], bool] | None = None  # see follow()
        self._followed: asyncio.Future[None] | None = None
        self._task = loop.create_task(self._run(producer), name=f"harmonia-{engine}-generation")

    # -- state ---------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[int, ...]:
        """Every id sampled so far."""
        return tuple(self._tokens)

    @property
    def logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """Every sampled id's :class:`TokenLogprob`, parallel to :attr:`tokens`.

        ``None`` when the parameters did not ask for them (``top_logprobs``).
        """
        return tuple(self._logprobs) if self._want_logprobs else None

    @property
    def last_logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """The log-probabilities of the chunk the iteration gave last (``None``: not asked).

        Read it right after each step of ``async for ids in generation``: it
        is parallel to that ``ids``.
        """
        return self._last_logprobs

    @property
    def finish(self) -> Finish | None:
        """Why it ended; ``None`` while it runs."""
        return self._finish

    @property
    def done(self) -> bool:
        """True once it has ended (its :attr:`finish` is set)."""
        return self._finish is not None

    @property
    def usage(self) -> Usage:
        """Prompt and completion token counts (so far, while it runs)."""
        return Usage(self.prompt_tokens, len(self._tokens))

    # -- the producer side ---------------------------------------------------------------

    def _emit(self, ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None = None) -> None:
        if self._finish is not None:
            return
        if self._ended is not None:  # a producer that swallowed _Ended and went on
            raise _Ended(self._ended)
        ids = list(map(int, ids))
        scores = self._check_logprobs(ids, logprobs) if self._want_logprobs else None
        # The chunk ends at the first stop id or at the token limit, the stop winning a
        # tie; both found at C speed (one call per streamed token).
        room = max(self.params.max_tokens - len(self._tokens), 1)
        ended: Finish | None = None
        chunk = ids
        if not self._stops.isdisjoint(ids):
            at = next(n for n, token in enumerate(ids) if token in self._stops)
            if at < room:
                chunk = ids[: at + 1]
                ended = Finish(FinishReason.STOP, stop_token=ids[at])
        if ended is None and len(ids) >= room:
            chunk = ids[:room]
            ended = Finish(FinishReason.LENGTH)
        if chunk:
            self._tokens.extend(chunk)
            kept = None if scores is None else tuple(scores[: len(chunk)])
            if kept is not None:
                self._logprobs.extend(kept)
            if self._follower is None:
                self._queue.put_nowait(_Chunk(tuple(chunk), kept))
            else:
                self._last_logprobs = kept
                self._hand_over(self._follower, tuple(chunk))
        if ended is not None:
            self._ended = ended
            raise _Ended(ended)

    def _check_logprobs(
        self, ids: list[int], logprobs: Sequence[TokenLogprob] | None
    ) -> list[TokenLogprob]:
        """``logprobs`` if they are one per id and for those ids; otherwise an EngineError."""
        scores = list(logprobs) if logprobs is not None else []
        if len(scores) != len(ids):
            raise EngineError(
                f"{self.engine} sent {len(ids)} ids with {len(scores)} log-probabilities; "
                "they would no longer line up with the ids",
                engine=self.engine,
            )
        for position, (token, score) in enumerate(zip(ids, scores, strict=True)):
            if not isinstance(score, TokenLogprob) or score.token != token:
                raise EngineError(
                    f"{self.engine} sent id {token} with the log-probability of "
                    f"{getattr(score, 'token', score)!r} (position {position} of the chunk)",
                    engine=self.engine,
                )
        return scores

    async def _run(self, producer: Producer) -> None:
        finish: Finish
        try:
            finish = await producer(self._emit)
            if self._ended is not None:  # the stop id or the limit came first
                finish = self._ended
        except _Ended as ended:
            finish = ended.finish
        except asyncio.CancelledError:
            finish = Finish(FinishReason.CANCELLED)
            if not self._cancelling:  # cancelled from outside (loop shutdown): propagate
                self._end(finish)
                raise
        except EngineError as exc:
            self._error = exc
            finish = Finish(FinishReason.ERROR, message=str(exc))
        except Exception as exc:
            self._error = EngineError(
                f"{self.engine} failed: {type(exc).__name__}: {exc}", engine=self.engine
            )
            self._error.__cause__ = exc
            finish = Finish(FinishReason.ERROR, message=str(self._error))
        self._end(finish)

    def _end(self, finish: Finish) -> None:
        if self._finish is None:
            self._finish = finish
            self._queue.put_nowait(None)
            if self._followed is not None and not self._followed.done():
                self._followed.set_result(None)

    def _hand_over(self, follower: Callable[[tuple[int, ...]], bool], ids: tuple[int, ...]) -> None:
        """``ids`` to the follower; its error or its wish to stop wakes :meth:`follow`."""
        assert self._followed is not None
        try:
            stop = follower(ids)
        except Exception as exc:  # the follower's, not the engine's: raised by follow()
            stop = True
            self._followed.set_exception(exc)
        if stop:
            self._follower = None
            if not self._followed.done():
                self._followed.set_result(None)

    # -- the consumer side ---------------------------------------------------------------

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> tuple[int, ...]:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # every later call ends too
            self._last_logprobs = None
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        # Hand over everything that is already here in one chunk.
        merged = list(item.ids)
        scores = None if item.logprobs is None else list(item.logprobs)
        while not self._queue.empty():
            more = self._queue.get_nowait()
            if more is None:
                self._queue.put_nowait(None)
                break
            merged.extend(more.ids)
            if scores is not None and more.logprobs is not None:
                scores.extend(more.logprobs)
        self._last_logprobs = None if scores is None else tuple(scores)
        return tuple(merged)

    async def follow(self, follower: Callable[[tuple[int, ...]], bool]) -> None:
        """Hand every chunk to ``follower`` until the end, instead of iterating.

        ``follower`` runs in the engine's task as each chunk is emitted (read
        :attr:`last_logprobs` inside it), so a consumer whose work per chunk is
        synchronous costs no task switch per chunk. It returns ``True`` to stop
        following (the caller then cancels). :meth:`follow` returns at the end or
        at that stop, and raises what ``follower`` raised, else the engine's error.
        """
        while not self._queue.empty():  # chunks emitted before: handed over first
            item = self._queue.get_nowait()
            if item is None:
                self._queue.put_nowait(None)
                break
            self._last_logprobs = item.logprobs
            if follower(item.ids):
                return
        if self._finish is None:
            self._followed = asyncio.get_running_loop().create_future()
            self._follower = follower
            try:
                await self._followed
            finally:
                self._follower = None
            if self._finish is None:  # stopped by the follower
                return
        if self._error is not None:
            raise self._error

    async def cancel(self) -> None:
        """Stop the generation and wait until the engine has stopped.

        Ids already sampled stay in :attr:`tokens`; :attr:`finish` becomes
        :attr:`FinishReason.CANCELLED` unless it had already ended.
        """
        if self._task.done():
            return
        self._cancelling = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def wait(self) -> Finish:
        """Wait for the end without consuming the chunks; the :class:`Finish`."""
        await asyncio.shield(self._task)
        assert self._finish is not None
        return self._finish

    async def result(self) -> Completion:
        """Wait for the end; every id, the finish and the usage (raises on an engine error)."""
        await self.wait()
        if self._error is not None:
            raise self._error
        assert self._finish is not None
        return Completion(self.tokens, self._finish, self.usage, self.logprobs)

    async def __aenter__(self) -> Generation:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.cancel()

    def __repr__(self) -> str:
        state = self._finish.reason.value if self._finish else "running"
        return f"<Generation {self.engine} {state} tokens={len(self._tokens)}>"


class PromptEngine(ABC):
    """The start of every engine's ``generate``, written once: the prompt checked into a
    tuple of ids, the default :class:`SamplingParams`, the :class:`Generation` built
    around the engine's producer.

    An engine says how to produce in :meth:`_producer`, called before the
    generation starts: whatever it refuses there (a constraint it cannot follow,
    a closed engine) is raised by ``generate`` itself, before anything runs.
    """

    name: str

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> Generation:
        """Start one generation after ``prompt`` (see :class:`~harmonia.engines.Engine`)."""
        ids = check_prompt(prompt, self.name)
        params = params or SamplingParams()
        producer = self._producer(ids, params, constraint)
        return Generation(producer, engine=self.name, prompt_tokens=len(ids), params=params)

    @abstractmethod
    def _producer(
        self, ids: tuple[int, ...], params: SamplingParams, constraint: Constraint | None
    ) -> Producer:
        """The producer of one generation (check the request here, start nothing)."""
