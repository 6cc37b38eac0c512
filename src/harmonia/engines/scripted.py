"""An engine that replays scripted completions: for tests, demos and benchmarks.

It is not a model: each :meth:`ScriptedEngine.generate` replays the next
:class:`Script` token by token, optionally paced, and can inject the faults
real engines show (an error after *n* tokens, a stall, a script that never
stops). Stop ids, ``max_tokens`` and cancellation behave exactly as with a
real engine; temperature, top-p and seed do not apply to a replay. Given a
constraint, every scripted id is checked against it, and an id the
constraint refuses ends the generation with an error, as a broken engine
would.

Asked for log-probabilities (``SamplingParams.top_logprobs``), it reports a
made-up but fixed distribution, so tests and demos can exercise the API
without a model: the scripted id is the most likely one, with probability
1/2; the *j*-th alternative (``j`` = 1, 2, ...) is the ordinary id *j* places
after it (wrapping round before the special ids), with probability
``2 ** -(j + 1)``. See :func:`scripted_logprob`.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from harmonia import EngineError, InputError

from .._tokenizer import special_tokens as st
from ._base import Constraint, Finish, FinishReason, SamplingParams, TokenLogprob, TokenMatcher
from ._generation import Emit, Producer, PromptEngine

_NAME = "scripted"


@dataclass(frozen=True)
class Script:
    """One scripted completion and the faults to inject while replaying it.

    * ``tokens``: the ids to replay (include the stop token to stop on it);
    * ``delay``: seconds to wait before each chunk (0: as fast as possible);
    * ``chunk_size``: ids per chunk;
    * ``fail_after``: raise :class:`~harmonia.EngineError` after this many ids;
    * ``stall_after``: after this many ids, go silent until cancelled;
    * ``repeat``: replay ``tokens`` over and over (a model that never stops;
      ``max_tokens`` ends it).
    """

    tokens: tuple[int, ...]
    delay: float = 0.0
    chunk_size: int = 1
    fail_after: int | None = None
    stall_after: int | None = None
    repeat: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        if self.delay < 0 or self.chunk_size < 1:
            raise InputError("Script.delay must be >= 0 and Script.chunk_size >= 1")
        if self.repeat and not self.tokens:
            raise InputError("a repeating Script needs at least one token")


def scripted_logprob(token: int, top_logprobs: int) -> TokenLogprob:
    """The log-probability :class:`ScriptedEngine` reports for a scripted ``token``.

    >>> lp = scripted_logprob(10, 2)
    >>> round(lp.logprob, 4), [(t, round(p, 4)) for t, p in lp.top]
    (-0.6931, [(10, -0.6931), (11, -1.3863)])
    """
    ordinary = st.FIRST_SPECIAL

    def at(j: int) -> int:
        # A special id's neighbours wrap into the ordinary ids too.
        return (token + j) % ordinary if j else token

    top = tuple((at(j), -(j + 1) * math.log(2)) for j in range(top_logprobs))
    return TokenLogprob(token, -math.log(2), top)


ScriptSource = Iterable[Script | Sequence[int]] | Callable[[tuple[int, ...]], Script]


@dataclass
class ScriptedEngine(PromptEngine):
    """Replays :class:`Script` s: the next one for each generation.

    ``scripts`` is a sequence of scripts (plain id sequences work too), used
    in order, or a function from the prompt ids to a script. Every prompt
    received is kept in :attr:`prompts`.

    >>> import asyncio
    >>> engine = ScriptedEngine([[1, 2, 3, 200002, 9]])
    >>> async def main():
    ...     generation = engine.generate([7, 8])
    ...     return (await generation.result())
    >>> completion = asyncio.run(main())
    >>> completion.tokens, completion.finish.reason.value, completion.finish.stop_token
    ((1, 2, 3, 200002), 'stop', 200002)
    """

    scripts: ScriptSource
    name: str = _NAME
    #: It reports log-probabilities (made up: see the module docs).
    supports_logprobs = True
    prompts: list[tuple[int, ...]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        if callable(self.scripts):
            self._factory: Callable[[tuple[int, ...]], Script] | None = self.scripts
            self._queue: list[Script] = []
        else:
            self._factory = None
            self._queue = [s if isinstance(s, Script) else Script(tuple(s)) for s in self.scripts]

    def _next_script(self, prompt: tuple[int, ...]) -> Script:
        if self._factory is not None:
            script = self._factory(prompt)
            return script if isinstance(script, Script) else Script(tuple(script))
        with self._lock:
            if not self._queue:
                raise EngineError(
                    "the scripted engine has no script left: give it one per generation",
                    engine=self.name,
                )
            return self._queue.pop(0)

    def _producer(
        self, ids: tuple[int, ...], params: SamplingParams, constraint: Constraint | None
    ) -> Producer:
        """Replay the next script for ``ids`` (taken now, with the prompt kept)."""
        self.prompts.append(ids)
        script = self._next_script(ids)
        matcher = constraint.new_matcher() if constraint is not None else None

        async def produce(emit: Emit) -> Finish:
            return await self._replay(script, matcher, emit, params.top_logprobs)

        return produce

    async def aclose(self) -> None:
        """Nothing to release."""

    async def _replay(
        self, script: Script, matcher: TokenMatcher | None, emit: Emit, top_logprobs: int | None
    ) -> Finish:
        sent = 0
        position = 0
        tokens = script.tokens
        while True:
            if script.fail_after is not None and sent >= script.fail_after:
                raise EngineError(f"injected fault after {sent} tokens", engine=self.name, url=None)
            if script.stall_after is not None and sent >= script.stall_after:
                await asyncio.Event().wait()  # silent until cancelled
            if position >= len(tokens):
                if not script.repeat:
                    # The script ran out without a stop id: say so, as a server would.
                    return Finish(FinishReason.LENGTH)
                position = 0
            # Even with no delay: stay cancellable and fair to other tasks.
            await asyncio.sleep(script.delay)
            limit = script.chunk_size
            for bound in (script.fail_after, script.stall_after):
                if bound is not None:
                    limit = min(limit, bound - sent)
            chunk = list(tokens[position : position + limit])
            if matcher is not None:
                for token in chunk:
                    try:
                        matcher.consume(token)
                    except Exception as exc:
                        raise EngineError(
                            f"scripted token {token} breaks the constraint: {exc}",
                            engine=self.name,
                        ) from exc
            position += len(chunk)
            sent += len(chunk)
            if top_logprobs is None:
                emit(chunk)
            else:
                emit(chunk, [scripted_logprob(token, top_logprobs) for token in chunk])
