"""AgentRun, the one driver: a caller's first prompt, hooks on sampled ids, begin() and cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from harmonia import Conversation, EngineError, InputError, Message, Role
from harmonia.agent import Agent, AgentLimits, RunHooks, StopReason
from harmonia.engines import Finish, FinishReason, Generation, ScriptedEngine
from harmonia.engines.scripted import Script

CALL = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'
FINAL = "<|channel|>final<|message|>Done.<|return|>"


def chat() -> Conversation:
    return Conversation.from_messages([Message.from_role_and_content(Role.USER, "Hi")])


class Recorder(RunHooks):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def step(self, number: int) -> None:
        self.seen.append(("step", number))

    def sampled(
        self, generation: Generation, ids: Sequence[int], start: int
    ) -> Sequence[Any] | None:
        # ``start`` locates the chunk in the generation (per-token data lines up with it).
        assert tuple(generation.tokens[start : start + len(ids)]) == tuple(ids)
        self.seen.append(("sampled", start, len(ids)))
        return None

    def generated(self, generation: Generation) -> None:
        self.seen.append(("generated", len(generation.tokens)))

    def tool_finished(self, call: Message, reply: Message | None) -> None:
        self.seen.append(("tool", call.recipient, reply is not None))


def test_the_first_prompt_is_the_callers_and_later_ones_are_rendered(turns):
    engine = ScriptedEngine([Script(turns(CALL), chunk_size=4), turns(FINAL)])
    hooks = Recorder()
    agent = Agent(engine, on_tool_call=lambda call: "one")
    prepared = (1, 2, 3)  # the caller's ids (a server's spliced prompt): used as they are

    async def main() -> Any:
        return await agent.run(chat(), prompt=prepared, hooks=hooks).result()

    result = asyncio.run(main())
    assert result.stop_reason is StopReason.FINAL and result.answer == "Done."
    assert engine.prompts[0] == prepared
    assert engine.prompts[1] != prepared and len(engine.prompts[1]) > 10  # rendered
    assert result.usage.prompt_tokens == 3 + len(engine.prompts[1])
    steps = [e for e in hooks.seen if e[0] in ("step", "generated", "tool")]
    n_call, n_final = len(turns(CALL)), len(turns(FINAL))
    assert steps == [
        ("step", 1),
        ("generated", n_call),
        ("tool", "functions.f", True),
        ("step", 2),
        ("generated", n_final),
    ]
    starts = [e[1] for e in hooks.seen if e[0] == "sampled"][: -n_final or None]
    assert starts == list(range(0, n_call, 4))  # contiguous chunks of the first generation


def test_the_wall_time_limit_cancels_a_running_tool(turns):
    cancelled: list[bool] = []

    async def never_answers(call: Message) -> str:
        try:
            await asyncio.Event().wait()  # nothing sets it: only a cancel ends the call
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "unreachable"

    engine = ScriptedEngine([turns(CALL)])
    agent = Agent(engine, on_tool_call=never_answers, limits=AgentLimits(max_seconds=0.05))
    result = agent.run_sync(chat())
    assert result.stop_reason is StopReason.MAX_SECONDS
    assert cancelled == [True]


class Refusing:
    name = "refusing"

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Generation:
        raise EngineError("no such grammar", engine=self.name)

    async def aclose(self) -> None:
        pass


def test_begin_raises_a_refusal_to_the_caller_where_a_lazy_run_ends_with_an_error():
    agent = Agent(Refusing())  # type: ignore[arg-type]

    async def main() -> Any:
        run = agent.run(chat())
        with pytest.raises(EngineError, match="no such grammar"):
            run.begin()
        return await agent.run(chat()).result()

    result = asyncio.run(main())
    assert result.stop_reason is StopReason.ERROR and isinstance(result.error, EngineError)


class Keeping(ScriptedEngine):
    """Keeps the generations it started."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.generations: list[Generation] = []

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Generation:
        self.generations.append(super().generate(prompt, params, constraint=constraint))
        return self.generations[-1]


def test_a_run_cancelled_before_its_task_runs_ends_cancelled_and_stops_the_engine(turns):
    engine = Keeping([Script(turns(FINAL), stall_after=0)])

    async def main() -> tuple[Any, Finish | None]:
        run = Agent(engine).run(chat())
        run.begin()  # the engine has started
        run.cancel()  # before the run's task had a chance to start
        result = await run.result()
        (generation,) = engine.generations
        return result, generation.finish

    result, finish = asyncio.run(main())
    assert result.stop_reason is StopReason.CANCELLED
    assert finish is not None and finish.reason is FinishReason.CANCELLED


def test_a_run_without_events_keeps_none_and_refuses_to_be_iterated(turns):
    # The server follows a run through its hooks; a run that kept one event per chunk
    # would hold them all until its end, for nobody.
    engine = ScriptedEngine([Script(turns(CALL), chunk_size=4), turns(FINAL)])
    hooks = Recorder()
    agent = Agent(engine, on_tool_call=lambda call: "one")

    async def main() -> Any:
        run = agent.run(chat(), hooks=hooks, events=False)
        result = await run.result()
        kept = run._queue
        with pytest.raises(InputError, match="events=False"):
            async for _ in run:
                pass
        return result, kept

    result, kept = asyncio.run(main())
    assert result.stop_reason is StopReason.FINAL and result.answer == "Done."
    assert kept is None
    # The hooks saw every chunk all the same.
    assert sum(e[2] for e in hooks.seen if e[0] == "sampled") == len(turns(CALL)) + len(
        turns(FINAL)
    )


def test_a_run_with_events_gives_the_same_result(turns):
    engine = ScriptedEngine([Script(turns(CALL), chunk_size=4), turns(FINAL)])
    agent = Agent(engine, on_tool_call=lambda call: "one")

    async def main() -> Any:
        run = agent.run(chat())
        kinds = [type(event).__name__ async for event in run]
        return await run.result(), kinds

    result, kinds = asyncio.run(main())
    assert result.answer == "Done." and kinds[-1] == "Done" and "FinalDelta" in kinds


class Reading(RunHooks):
    """Reads the ids as a server does (an OutputAssembler) and hands the loop its events."""

    def __init__(self) -> None:
        self.assembler: Any = None

    def sampled(self, generation: Generation, ids: Sequence[int], start: int) -> Sequence[Any]:
        if start == 0:
            from harmonia import OutputAssembler, load_harmony_encoding

            self.assembler = OutputAssembler(load_harmony_encoding("HarmonyGptOss"))
        return [event for token in ids for event in self.assembler.feed(token)]


LONG = "<|channel|>final<|message|>" + "many words " * 20 + "<|return|>"


@pytest.mark.parametrize("stall", [None, 12])
def test_a_quiet_run_counts_every_id_of_text_it_did_not_send_to_the_loop(turns, stall):
    # A run without events hands the loop no read that holds only text (the loop would
    # make nothing of it but a count): the count still reaches the result, also when
    # the run is cancelled in the middle of the text.
    def run(events: bool) -> Any:
        engine = ScriptedEngine([Script(turns(LONG), chunk_size=1, stall_after=stall)])

        async def main() -> Any:
            run = Agent(engine).run(chat(), hooks=Reading(), events=events)
            if stall is None:
                return await run.result()
            run.begin()
            for _ in range(200):  # until the engine has sent all it will (no timing)
                await asyncio.sleep(0)
            run.cancel()
            return await run.result()

        return asyncio.run(main())

    quiet, loud = run(False), run(True)
    expected = len(turns(LONG)) if stall is None else stall
    assert quiet.usage.completion_tokens == loud.usage.completion_tokens == expected
    assert quiet.stop_reason is loud.stop_reason
    assert quiet.stop_reason is (StopReason.FINAL if stall is None else StopReason.CANCELLED)
    assert quiet.answer == loud.answer
