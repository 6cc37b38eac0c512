"""The engine protocol through the scripted engine: chunks, finishes, cancel, faults, sync."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harmonia import (
    Conversation,
    EngineError,
    HarmonyEncoding,
    InputError,
    Message,
    Role,
)
from harmonia.engines import (
    HARMONY_STOP_TOKEN_IDS,
    Constraint,
    Engine,
    Finish,
    FinishReason,
    Generation,
    SamplingParams,
    Script,
    ScriptedEngine,
    SyncEngine,
    TokenMatcher,
)
from harmonia.engines._base import _check_each, check_prompt
from random_model_steering import ForcedMatcher

PROMPT = [200006, 1428, 200008, 5, 200007, 200006, 173781]


def test_stop_tokens_are_harmonys(enc: HarmonyEncoding) -> None:
    assert sorted(HARMONY_STOP_TOKEN_IDS) == enc.stop_tokens_for_assistant_actions()
    assert SamplingParams().stop_token_ids == HARMONY_STOP_TOKEN_IDS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"max_tokens": 2.5},
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"top_p": 0},
        {"top_p": 1.5},
        {"seed": "7"},
        {"stop_token_ids": [-1]},
    ],
)
def test_sampling_params_refuse_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="SamplingParams"):
        SamplingParams(**kwargs)


def test_sampling_params_keep_their_own_copy_of_stop_ids() -> None:
    stops = [1, 2]
    params = SamplingParams(stop_token_ids=stops)  # type: ignore[arg-type]
    stops.append(3)
    assert params.stop_token_ids == (1, 2)


def test_engines_satisfy_the_protocol() -> None:
    assert isinstance(ScriptedEngine([]), Engine)


def test_stop_id_ends_it_and_is_yielded() -> None:
    engine = ScriptedEngine([[1, 2, 200012, 3, 4]])
    completion = asyncio.run(_result(engine))
    assert completion.tokens == (1, 2, 200012)
    assert completion.finish == Finish(FinishReason.STOP, stop_token=200012)
    assert completion.usage.prompt_tokens == len(PROMPT)
    assert completion.usage.completion_tokens == 3
    assert engine.prompts == [tuple(PROMPT)]


def test_length_limit_cuts_a_chunk() -> None:
    engine = ScriptedEngine([Script((1, 2, 3), chunk_size=2, repeat=True)])
    completion = asyncio.run(_result(engine, SamplingParams(max_tokens=5)))
    assert completion.tokens == (1, 2, 3, 1, 2)
    assert completion.finish.reason is FinishReason.LENGTH


@given(
    st.lists(st.sampled_from([1, 2, 3, 200002, 200012]), max_size=12),
    st.integers(1, 4),
    st.integers(1, 10),
)
def test_a_chunk_ends_where_an_id_by_id_reading_ends_it(
    ids: list[int], chunk_size: int, max_tokens: int
) -> None:
    # The rule, read one id at a time: each id is kept; a stop id ends it (stop),
    # else reaching max_tokens ends it (length); the stop wins a tie.
    kept: list[int] = []
    reason = None
    for token in ids:
        kept.append(token)
        if token in (200002, 200012):
            reason = FinishReason.STOP
            break
        if len(kept) >= max_tokens:
            reason = FinishReason.LENGTH
            break
    script = Script(tuple(ids), chunk_size=chunk_size)
    params = SamplingParams(max_tokens=max_tokens, stop_token_ids=(200002, 200012))
    completion = asyncio.run(_result(ScriptedEngine([script]), params))
    assert completion.tokens == tuple(kept)
    assert completion.finish.reason is (reason or FinishReason.LENGTH)  # ran out: length
    if reason is FinishReason.STOP:
        assert completion.finish.stop_token == kept[-1]


async def _result(engine: ScriptedEngine, params: SamplingParams | None = None) -> Any:
    return await engine.generate(PROMPT, params).result()


def test_chunks_arrive_as_they_come() -> None:
    engine = ScriptedEngine([Script((1, 2, 3, 200002), delay=0.01)])

    async def main() -> list[tuple[int, ...]]:
        return [ids async for ids in engine.generate(PROMPT)]

    chunks = asyncio.run(main())
    assert [t for chunk in chunks for t in chunk] == [1, 2, 3, 200002]
    assert len(chunks) > 1  # paced: not one lump at the end


def test_cancel_is_prompt_and_keeps_what_came() -> None:
    engine = ScriptedEngine([Script((7,), delay=0.01, repeat=True)])

    async def main() -> tuple[Generation, int, int]:
        generation = engine.generate(PROMPT)
        async for _ in generation:
            if len(generation.tokens) >= 3:
                break
        await generation.cancel()
        at_cancel = len(generation.tokens)
        await asyncio.sleep(0.05)  # five more tokens' time: none may come
        return generation, at_cancel, len(generation.tokens)

    generation, at_cancel, later = asyncio.run(main())
    assert generation.finish == Finish(FinishReason.CANCELLED)
    assert generation.tokens[:3] == (7, 7, 7)
    assert later == at_cancel  # counted, not timed: nothing came after cancel() returned


def test_leaving_the_context_manager_cancels() -> None:
    engine = ScriptedEngine([Script((7,), delay=0.005, repeat=True)])

    async def main() -> Generation:
        async with engine.generate(PROMPT) as generation:
            async for _ in generation:
                break
        return generation

    assert asyncio.run(main()).finish == Finish(FinishReason.CANCELLED)


def test_injected_error_is_raised_and_recorded() -> None:
    engine = ScriptedEngine([Script((1, 2, 3, 4), fail_after=2)])

    async def main() -> Generation:
        generation = engine.generate(PROMPT)
        with pytest.raises(EngineError, match="injected fault after 2 tokens"):
            async for _ in generation:
                pass
        return generation

    generation = asyncio.run(main())
    assert generation.tokens == (1, 2)
    assert generation.finish is not None
    assert generation.finish.reason is FinishReason.ERROR


def test_a_stall_lasts_until_cancelled() -> None:
    engine = ScriptedEngine([Script((1, 2, 3), stall_after=1)])

    async def main() -> Generation:
        generation = engine.generate(PROMPT)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(generation.wait(), 0.1)
        await generation.cancel()
        return generation

    generation = asyncio.run(main())
    assert generation.tokens == (1,)
    assert generation.finish == Finish(FinishReason.CANCELLED)


def test_a_bug_in_an_engine_becomes_an_engine_error() -> None:
    async def produce(emit: Any) -> Finish:
        emit([1])
        raise KeyError("oops")

    async def main() -> None:
        generation = Generation(produce, engine="mine", prompt_tokens=1, params=SamplingParams())
        with pytest.raises(EngineError, match="mine failed: KeyError") as info:
            await generation.result()
        assert isinstance(info.value.__cause__, KeyError)

    asyncio.run(main())


def test_generate_without_a_loop_says_what_to_use() -> None:
    with pytest.raises(InputError, match="SyncEngine"):
        ScriptedEngine([[1]]).generate(PROMPT)


def test_bad_prompts_are_refused() -> None:
    async def main() -> None:
        engine = ScriptedEngine([[1], [1]])
        with pytest.raises(InputError, match="empty"):
            engine.generate([])
        with pytest.raises(InputError, match=r"prompt\[1\]"):
            engine.generate([1, "a"])  # type: ignore[list-item]

    asyncio.run(main())


def test_no_script_left_is_an_engine_error() -> None:
    async def main() -> None:
        engine = ScriptedEngine([])
        with pytest.raises(EngineError, match="no script left"):
            engine.generate(PROMPT)

    asyncio.run(main())


def test_scripts_can_depend_on_the_prompt() -> None:
    engine = ScriptedEngine(lambda prompt: [len(prompt), 200002])
    assert asyncio.run(_result(engine)).tokens == (len(PROMPT), 200002)


def test_a_constraint_is_enforced_on_the_script(enc: HarmonyEncoding) -> None:
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    conversation = Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")])
    constraint = Constraint.from_conversation(conversation)
    good = enc.encode("<|channel|>final<|message|>Hello!<|return|>", allowed_special="all")
    bad = enc.encode("<|channel|>final<|message|>Hello!<|end|>", allowed_special="all")
    engine = ScriptedEngine([good, bad])

    async def main() -> tuple[Any, Generation]:
        ok = await engine.generate(PROMPT, constraint=constraint).result()
        broken = engine.generate(PROMPT, constraint=constraint)
        with pytest.raises(EngineError, match="breaks the constraint"):
            await broken.result()
        return ok, broken

    ok, broken = asyncio.run(main())
    assert list(ok.tokens) == good
    assert list(broken.tokens) == good[:-1]


def test_constraint_needs_something_and_copies_the_matcher() -> None:
    with pytest.raises(InputError, match="grammar, a matcher"):
        Constraint()
    with pytest.raises(InputError, match="fill_mask"):
        Constraint(matcher=object())  # type: ignore[arg-type]
    template = ForcedMatcher([1, 2])
    assert isinstance(template, TokenMatcher)
    fresh = Constraint(matcher=template).new_matcher()
    fresh.consume(1)
    assert template.position == 0


def test_sync_engine_iterates_cancels_and_closes() -> None:
    scripts = [Script((1, 2, 200002)), *[Script((5,), delay=0.005, repeat=True)] * 2]
    with SyncEngine(ScriptedEngine(scripts)) as engine:
        first = engine.generate(PROMPT)
        assert [t for chunk in first for t in chunk] == [1, 2, 200002]
        assert first.finish == Finish(FinishReason.STOP, stop_token=200002)
        second = engine.generate(PROMPT)
        next(iter(second))
        second.cancel()
        assert second.finish == Finish(FinishReason.CANCELLED)
        assert second.result().finish.reason is FinishReason.CANCELLED
        with engine.generate(PROMPT) as third:
            for _ in third:
                break
        assert third.finish == Finish(FinishReason.CANCELLED)
    assert not engine._thread.is_alive()
    with pytest.raises(InputError, match="closed"):
        engine.generate(PROMPT)


def test_a_producer_that_swallows_the_stop_is_still_stopped() -> None:
    async def produce(emit: Any) -> Finish:
        for token in (1, 200002, 3, 4):
            with contextlib.suppress(Exception):  # a careless engine
                emit([token])
        return Finish(FinishReason.LENGTH)

    async def main() -> Any:
        params = SamplingParams()
        return await Generation(produce, engine="careless", prompt_tokens=1, params=params).result()

    completion = asyncio.run(main())
    assert completion.tokens == (1, 200002)
    assert completion.finish == Finish(FinishReason.STOP, stop_token=200002)


_IDS = st.one_of(
    st.integers(min_value=-3, max_value=201_087),
    st.booleans(),
    st.sampled_from(["7", 1.0, None]),
)


@given(st.lists(_IDS, max_size=12) | st.lists(st.integers(0, 201_087), max_size=40))
def test_a_prompt_is_checked_as_id_by_id_whatever_its_path(prompt: list[Any]) -> None:
    """The C-speed path for plain ints answers as the id-by-id check does, errors included."""

    def outcome(check: Any) -> Any:
        try:
            return check(prompt, "scripted")
        except InputError as exc:
            return str(exc)

    assert outcome(check_prompt) == outcome(_check_each)


def test_a_prompt_of_numpy_ints_becomes_plain_ints() -> None:
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    ids = check_prompt(numpy.array([200006, 17360, 0], dtype=numpy.int64), "scripted")
    assert ids == (200006, 17360, 0) and all(type(i) is int for i in ids)
