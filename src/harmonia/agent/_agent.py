"""The drivers: :class:`AgentLoop` run against a real engine and real tools.

The engine is driven only through the :class:`~harmonia.engines.Engine`
protocol and the tools only through a :class:`~harmonia.tools.Toolbox`; all
decisions are the loop's. :meth:`Agent.run` is the async driver (an async
iterator of events, then the result); :meth:`Agent.run_sync` the blocking one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Final

from harmonia import (
    Conversation,
    EngineError,
    HarmonyEncoding,
    HarmonyEncodingName,
    HarmonyError,
    InputError,
    ItemDelta,
    Message,
    OutputEvent,
    load_harmony_encoding,
)
from harmonia._runtime import run_sync
from harmonia.engines import (
    Constraint,
    Engine,
    Finish,
    FinishReason,
    Generation,
    SamplingParams,
)
from harmonia.tools import Toolbox, tool_reply

from ._events import AgentEvent, AgentResult, Done, StopReason
from ._limits import AgentLimits
from ._loop import (
    DEFAULT_COT_POLICY,
    AgentLoop,
    Cancel,
    ConstraintFactory,
    Finished,
    GenerationFinished,
    Input,
    ItemsSampled,
    RunTool,
    Sample,
    Start,
    State,
    Step,
    TokensSampled,
    ToolResult,
)

logger = logging.getLogger("harmonia.agent")

ToolCallback = Callable[[Message], Message | str | Awaitable[Message | str | None] | None]
"""Answers a call no runtime in the toolbox owns: a reply, its text, or ``None`` (return it)."""


class Agent:
    """Runs gpt-oss turns with tools: sample, parse, call tools, repeat until an answer.

    * ``engine``: any :class:`~harmonia.engines.Engine`;
    * ``toolbox``: the runtimes that answer calls (``None``: every call goes to
      ``on_tool_call`` or back to the caller);
    * ``params``: sampling for every step (``max_tokens`` is lowered to what
      the run has left);
    * ``limits``: :class:`AgentLimits`;
    * ``constraint``: ``True`` constrains every step to the harmony turn that
      continues the conversation (``Constraint.from_conversation``), or a
      function from the conversation to a ``Constraint``;
    * ``on_tool_call``: answers the calls no runtime owns (sync or async);
      returning ``None`` hands the call back (``StopReason.TOOL_CALLS``).

    Declaring the tools in the system and developer messages is the
    conversation's business: :func:`~harmonia.agent.new_conversation` writes
    them from a toolbox.
    """

    def __init__(
        self,
        engine: Engine,
        toolbox: Toolbox | None = None,
        *,
        encoding: HarmonyEncoding | None = None,
        params: SamplingParams | None = None,
        limits: AgentLimits | None = None,
        constraint: bool | ConstraintFactory = False,
        on_tool_call: ToolCallback | None = None,
        cot_policy: str = DEFAULT_COT_POLICY,
    ) -> None:
        self.engine = engine
        self.toolbox = toolbox
        self.encoding = encoding or load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        self.params = params or SamplingParams()
        self.limits = limits or AgentLimits()
        if constraint is True:
            self.constraint: ConstraintFactory | None = Constraint.from_conversation
        elif constraint is False:
            self.constraint = None
        else:
            self.constraint = constraint
        self.on_tool_call = on_tool_call
        self.cot_policy = cot_policy

    def loop(
        self,
        conversation: Conversation,
        *,
        prompt: Sequence[int] | None = None,
        deltas: bool = True,
    ) -> AgentLoop:
        """A fresh state machine for one run over ``conversation`` (``prompt``: its first;
        ``deltas=False``: no text delta events)."""
        return AgentLoop(
            self.encoding,
            conversation,
            params=self.params,
            limits=self.limits,
            constraint=self.constraint,
            cot_policy=self.cot_policy,
            prompt=prompt,
            deltas=deltas,
        )

    def run(
        self,
        conversation: Conversation,
        *,
        prompt: Sequence[int] | None = None,
        hooks: RunHooks | None = None,
        events: bool = True,
    ) -> AgentRun:
        """Start a run (lazily, on first use): iterate its events, or await its result.

        ``prompt``: the first step's ids, when the caller rendered them itself;
        ``hooks``: see :class:`RunHooks`; ``events=False``: the run keeps no
        events (a caller that follows it through its hooks alone, as the
        server does: one event per sampled chunk, held until the run ends,
        would be kept for nobody); iterating such a run is an ``InputError``.
        """
        return AgentRun(self, conversation, prompt=prompt, hooks=hooks, events=events)

    def run_sync(
        self,
        conversation: Conversation,
        *,
        on_event: Callable[[AgentEvent], None] | None = None,
    ) -> AgentResult:
        """Run to the end from blocking code; ``on_event`` sees every event as it happens.

        Not for use inside a running event loop (``await agent.run(...).result()`` there).
        """

        async def main() -> AgentResult:
            run = self.run(conversation)
            async for event in run:
                if on_event is not None:
                    on_event(event)
            return await run.result()

        return run_sync(
            main,
            "Agent.run_sync was called inside a running event loop; "
            "use `await agent.run(conversation).result()` there",
        )

    async def aclose(self) -> None:
        """Close the engine and the toolbox."""
        await self.engine.aclose()
        if self.toolbox is not None:
            await self.toolbox.aclose()

    # -- what the driver does for each action -------------------------------------------

    async def _call_tool(self, call: Message) -> Message | None:
        if self.toolbox is not None:
            reply = await self.toolbox.dispatch(call)
            if reply is not None:
                return reply
        if self.on_tool_call is None:
            return None
        try:
            answer = self.on_tool_call(call)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            # A failing callback is the tool's failure: the model reads it, the loop goes on.
            logger.warning("on_tool_call failed for %s", call.recipient, exc_info=True)
            answer = f"Error: {call.recipient} failed: {type(exc).__name__}: {exc}"
        if answer is None or isinstance(answer, Message):
            return answer
        return tool_reply(call, str(answer))


class RunHooks:
    """What a caller sees of a run besides its events (the server feeds its API stream here).

    Every method here does nothing; they run in the run's task, except
    ``sampled``, which runs in the engine's as each chunk comes. ``sampled``
    gets each chunk of ids, ``generation.tokens[start:]``, and may return the
    item events an ``OutputAssembler`` read from them: the loop then follows
    those (``ItemsSampled``), so what runs is what the caller showed.
    """

    def step(self, number: int) -> None:
        """Generation ``number`` (from 1) is about to start."""

    def sampled(
        self, generation: Generation, ids: Sequence[int], start: int
    ) -> Sequence[OutputEvent] | None:
        """The engine produced ``ids``; what they read as, or ``None`` (the loop reads them)."""
        return None

    def generated(self, generation: Generation) -> None:
        """``generation`` ended, however it ended."""

    def tool_finished(self, call: Message, reply: Message | None) -> None:
        """A tool call ran (one the wall-time limit cancelled never does)."""


#: The hooks of a run that has ended (it calls none).
_NO_HOOKS: Final = RunHooks()


class AgentRun:
    """One run: ``async for event in run`` shows it happen; ``await run.result()`` ends it.

    This is the one driver of :class:`AgentLoop` (the library's agent and the
    server's responses both run through it). The run starts on first use, or
    at :meth:`begin`. ``cancel()`` stops it at once (the generation or the tool
    call in flight is cancelled) and the run ends with ``StopReason.CANCELLED``;
    the wall-time limit cancels it the same way (``StopReason.MAX_SECONDS``).
    ``async with agent.run(...) as run:`` cancels on the way out.
    """

    def __init__(
        self,
        agent: Agent,
        conversation: Conversation,
        *,
        prompt: Sequence[int] | None = None,
        hooks: RunHooks | None = None,
        events: bool = True,
    ) -> None:
        self._agent = agent
        # Without events nothing reads the loop's text deltas: it makes none.
        self._machine = agent.loop(conversation, prompt=prompt, deltas=events)
        self._hooks = hooks or RunHooks()
        # None: events=False, nothing is kept (see Agent.run).
        self._queue: asyncio.Queue[AgentEvent] | None = asyncio.Queue() if events else None
        self._task: asyncio.Task[AgentResult] | None = None
        self._stop: StopReason | None = None  # why we cancelled our own task
        self._running = False  # the task has begun (a task cancelled before it runs never does)
        self._ended = False

    @property
    def loop(self) -> AgentLoop:
        """The state machine behind this run."""
        return self._machine

    def begin(self) -> None:
        """Start now: the engine is asked for the first generation before this returns.

        An engine that refuses outright (a constraint it cannot take) raises its
        :class:`~harmonia.EngineError` here, to a caller who can still answer
        with a status; a run started on first use ends with ``StopReason.ERROR``.
        """
        if self._task is None:
            step, first = self._machine.send(Start()), None
            try:
                if isinstance(step.action, Sample):
                    self._hooks.step(1)
                    first = self._generate(step.action)
            except EngineError as exc:  # the run ends with it; the caller hears of it now
                step = self._machine.send(_failed(exc))
                raise
            finally:
                self._task = asyncio.get_running_loop().create_task(self._drive(step, first))

    def _ensure_started(self) -> asyncio.Task[AgentResult]:
        if self._task is None:
            with contextlib.suppress(EngineError):  # begin() made it a run that failed
                self.begin()
        assert self._task is not None
        return self._task

    def cancel(self, reason: StopReason = StopReason.CANCELLED) -> None:
        """Stop the run; it ends with ``reason``. Safe to call from a signal handler."""
        task = self._ensure_started()
        if self._stop is None and not task.done():
            self._stop = reason
            if self._running:  # else the task sees _stop when it begins
                task.cancel()

    async def result(self) -> AgentResult:
        """Wait for the end and return the result."""
        return await asyncio.shield(self._ensure_started())

    def __aiter__(self) -> AsyncIterator[AgentEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[AgentEvent]:
        queue = self._queue
        if queue is None:
            raise InputError(
                "this run was started with events=False and keeps no events; "
                "await run.result(), or start it with events=True to iterate it"
            )
        task = self._ensure_started()
        while not self._ended:
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                if queue.empty():
                    task.result()  # the driver failed: raise its error here
                    return
                continue
            event = getter.result()
            if isinstance(event, Done):
                self._ended = True
            yield event

    async def __aenter__(self) -> AgentRun:
        self._ensure_started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cancel()
        await self.result()

    # -- the driver ------------------------------------------------------------------

    def _emit(self, step: Step) -> None:
        if self._queue is not None:
            for event in step.events:
                self._queue.put_nowait(event)

    async def _drive(self, step: Step, first: Generation | None) -> AgentResult:
        self._running = True
        machine = self._machine
        seconds = machine.limits.max_seconds
        timer = (
            asyncio.get_running_loop().call_later(seconds, self.cancel, StopReason.MAX_SECONDS)
            if seconds is not None
            else None
        )
        generation, steps = first, 1
        try:
            if self._stop is not None and not isinstance(step.action, Finished):  # before it began
                raise asyncio.CancelledError
            while True:
                self._emit(step)
                action = step.action
                if isinstance(action, Finished):
                    return action.result
                if isinstance(action, RunTool):
                    reply = await self._agent._call_tool(action.call)
                    self._hooks.tool_finished(action.call, reply)
                    step = machine.send(ToolResult(reply))
                else:
                    # Between inputs the loop always asks for something: here, a generation.
                    assert isinstance(action, Sample), step
                    if generation is None:
                        steps += 1
                        self._hooks.step(steps)
                    step = await self._sample(action, generation)
                    generation = None
        except asyncio.CancelledError:
            if self._stop is None:
                raise  # someone else cancelled us: not ours to swallow
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):  # Python 3.11+
                task.uncancel()  # our own cancel, handled: the task goes on to its result
            if generation is not None:
                await generation.cancel()  # started by begin(), never read: the engine stops
            step = machine.send(Cancel(self._stop))
            self._emit(step)
            assert isinstance(step.action, Finished)
            return step.action.result
        finally:
            if timer is not None:
                timer.cancel()
            # Over: the hooks are let go of. A server's hooks hold this run, and the cycle
            # left each request's state to the cyclic collector (issue 34).
            self._hooks = _NO_HOOKS

    def _generate(self, action: Sample) -> Generation:
        return self._agent.engine.generate(
            action.prompt, action.params, constraint=action.constraint
        )

    async def _sample(self, action: Sample, generation: Generation | None) -> Step:
        machine = self._machine
        step: Step | None = None
        if generation is None:
            try:
                generation = self._generate(action)
            except EngineError as exc:  # refused before anything ran (a constraint it cannot take)
                return machine.send(_failed(exc))
        started, start, unsent = generation, 0, 0
        quiet = self._queue is None  # the loop makes no text delta events (see __init__)

        def follow(ids: tuple[int, ...]) -> bool:  # in the engine's task: no switch per chunk
            nonlocal start, step, unsent
            read = self._hooks.sampled(started, ids, start)
            start += len(ids)
            text_only = (
                quiet
                and read is not None
                and (not read or (len(read) == 1 and type(read[0]) is ItemDelta))
            )
            if text_only:
                # Text only, which a quiet loop turns into nothing but a count: counted
                # here and sent with the next input (one less object per streamed token).
                unsent += len(ids)
                return False
            if read is None:
                sampled: Input = TokensSampled(ids)
            else:
                sampled, unsent = ItemsSampled(unsent + len(ids), tuple(read)), 0
            step = machine.send(sampled)
            if isinstance(step.action, Finished):
                return True  # the model wrote something that is not harmony
            self._emit(step)
            return False

        try:
            async with generation:  # leaving early (an error, a cancel) stops the engine
                try:
                    await generation.follow(follow)
                except HarmonyError as exc:  # an EngineError, or what a hook refused
                    return machine.send(_failed(exc))
                if step is not None and isinstance(step.action, Finished):
                    return step
        finally:
            if unsent and machine.state is State.SAMPLING:  # every id is counted, however it ended
                machine.send(ItemsSampled(unsent, ()))
            self._hooks.generated(generation)
        finish = generation.finish or Finish(FinishReason.CANCELLED)
        return machine.send(GenerationFinished(finish))


def _failed(exc: HarmonyError) -> GenerationFinished:
    return GenerationFinished(Finish(FinishReason.ERROR, message=str(exc)), exc)
