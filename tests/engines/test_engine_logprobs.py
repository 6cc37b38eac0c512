"""Log-probabilities at the engine layer: the types, Generation's alignment, the scripted ones."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest

from harmonia import EngineError, InputError
from harmonia.engines import (
    Emit,
    Finish,
    FinishReason,
    Generation,
    SamplingParams,
    Script,
    ScriptedEngine,
    SyncEngine,
    TokenLogprob,
)
from harmonia.engines._logprobs import MalformedLogprobs, from_completions, from_entry, top_pairs
from harmonia.engines.scripted import scripted_logprob

PROMPT = [200006, 1428, 200008, 5, 200007, 200006, 173781]


def test_top_logprobs_is_none_or_0_to_20() -> None:
    assert SamplingParams().top_logprobs is None
    assert not SamplingParams().logprobs
    assert SamplingParams(top_logprobs=0).logprobs
    assert SamplingParams(top_logprobs=20).top_logprobs == 20
    for bad in (-1, 21, True, 2.0, "3"):
        with pytest.raises(InputError, match="top_logprobs"):
            SamplingParams(top_logprobs=bad)  # type: ignore[arg-type]


def test_token_logprob_is_frozen_and_never_above_zero() -> None:
    lp = TokenLogprob(3, 1e-7, [(3, 1e-7), (4, -2)])  # type: ignore[arg-type]
    assert lp.logprob == 0.0 and lp.top == ((3, 0.0), (4, -2.0))
    with pytest.raises(AttributeError):
        lp.logprob = -1.0  # type: ignore[misc]
    with pytest.raises(InputError):
        TokenLogprob(3, math.nan)
    with pytest.raises(InputError):
        TokenLogprob(-1, -1.0)


def _run(engine: ScriptedEngine, params: SamplingParams) -> tuple[list[Any], Any]:
    async def main() -> tuple[list[Any], Any]:
        generation = engine.generate(PROMPT, params)
        chunks = []
        async for ids in generation:
            chunks.append((ids, generation.last_logprobs))
        return chunks, await generation.result()

    return asyncio.run(main())


def test_scripted_logprobs_are_parallel_to_the_ids_in_every_chunk() -> None:
    script = Script((10, 11, 12, 13, 200002), chunk_size=2)
    chunks, completion = _run(ScriptedEngine([script]), SamplingParams(top_logprobs=3))
    assert completion.tokens == (10, 11, 12, 13, 200002)
    assert completion.logprobs is not None
    assert [lp.token for lp in completion.logprobs] == list(completion.tokens)
    for ids, logprobs in chunks:
        assert logprobs is not None and [lp.token for lp in logprobs] == list(ids)
    for lp in completion.logprobs:
        assert lp.logprob == pytest.approx(math.log(0.5))
        assert len(lp.top) == 3
        values = [value for _, value in lp.top]
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0
        assert lp.top[0] == (lp.token, lp.logprob)  # the scripted id is the most likely


def test_no_logprobs_unless_asked() -> None:
    chunks, completion = _run(ScriptedEngine([[10, 200002]]), SamplingParams())
    assert completion.logprobs is None
    assert all(logprobs is None for _, logprobs in chunks)


def test_top_logprobs_zero_gives_only_the_sampled_ids_logprob() -> None:
    _, completion = _run(ScriptedEngine([[10, 200002]]), SamplingParams(top_logprobs=0))
    assert [(lp.token, lp.top) for lp in completion.logprobs] == [(10, ()), (200002, ())]


def test_scripted_alternatives_wrap_before_the_special_ids() -> None:
    # The neighbours of the last ordinary id and of a special id are ordinary ids.
    last_ordinary = 199_997  # the id before <|startoftext|>, the first special one
    assert [t for t, _ in scripted_logprob(last_ordinary, 3).top] == [last_ordinary, 0, 1]
    assert all(t < 199_998 for t, _ in scripted_logprob(200002, 4).top[1:])


def test_a_stop_id_or_the_length_cut_keeps_the_logprobs_aligned() -> None:
    script = Script((10, 200002, 11, 12), chunk_size=4)
    _, completion = _run(ScriptedEngine([script]), SamplingParams(top_logprobs=1))
    assert [lp.token for lp in completion.logprobs] == [10, 200002]
    script = Script((10, 11, 12, 13), chunk_size=4)
    _, completion = _run(ScriptedEngine([script]), SamplingParams(max_tokens=3, top_logprobs=1))
    assert [lp.token for lp in completion.logprobs] == [10, 11, 12]


def _producer(ids: Sequence[int], logprobs: Sequence[TokenLogprob] | None) -> Any:
    async def produce(emit: Emit) -> Finish:
        emit(ids, logprobs)
        return Finish(FinishReason.LENGTH)

    return produce


@pytest.mark.parametrize(
    ("logprobs", "message"),
    [
        (None, "2 ids with 0 log-probabilities"),
        ([TokenLogprob(1, -1.0)], "2 ids with 1 log-probabilities"),
        ([TokenLogprob(1, -1.0), TokenLogprob(3, -1.0)], "id 2 with the log-probability of 3"),
    ],
)
def test_generation_fails_loudly_when_logprobs_do_not_line_up(
    logprobs: list[TokenLogprob] | None, message: str
) -> None:
    async def main() -> None:
        params = SamplingParams(top_logprobs=0)
        generation = Generation(
            _producer([1, 2], logprobs), engine="custom", prompt_tokens=1, params=params
        )
        await generation.result()

    with pytest.raises(EngineError, match=message):
        asyncio.run(main())


def test_logprobs_not_asked_for_are_ignored() -> None:
    async def main() -> Any:
        generation = Generation(
            _producer([1, 2], [TokenLogprob(9, -1.0)]),
            engine="custom",
            prompt_tokens=1,
            params=SamplingParams(),
        )
        return await generation.result()

    completion = asyncio.run(main())
    assert completion.tokens == (1, 2) and completion.logprobs is None


def test_remote_entries_are_read_by_id_sorted_and_cut() -> None:
    llama = {
        "id": 5,
        "token": "a",
        "bytes": [97],
        "logprob": -0.7,
        "top_logprobs": [{"id": 6, "logprob": -0.5}, {"id": 5, "logprob": -0.7}],
    }
    assert from_entry(llama, 1) == TokenLogprob(5, -0.7, ((6, -0.5),))
    old_vllm = {"token": "token_id:5", "logprob": -0.7, "top_logprobs": []}
    assert from_entry(old_vllm, 2) == TokenLogprob(5, -0.7)
    new_vllm = {"token_id": 5, "logprob": -9999.0, "top_logprobs": [{"token_id": 5}]}
    assert from_entry(new_vllm, 2).top == ((5, -math.inf),)
    completions = {
        "tokens": ["token_id:5", "token_id:7"],
        "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -3.0}, None],
    }
    assert from_completions(completions, 5) == [
        TokenLogprob(5, -0.1, ((5, -0.1), (9, -3.0))),
        TokenLogprob(7, -0.2),
    ]
    assert top_pairs([(1, -2.0), (2, -1.0), (1, -0.5)], 2) == ((1, -0.5), (2, -1.0))
    for bad in ({"token": "a", "logprob": -1}, {"id": 1, "logprob": "x"}, [1]):
        with pytest.raises(MalformedLogprobs):
            from_entry(bad, 1)
    with pytest.raises(MalformedLogprobs, match="token_id:N"):
        from_completions({"tokens": ["a"], "token_logprobs": [-1.0]}, 1)


def test_sync_generations_show_the_logprobs_too() -> None:
    with SyncEngine(ScriptedEngine([Script((10, 11, 200002), chunk_size=2)])) as engine:
        generation = engine.generate(PROMPT, SamplingParams(top_logprobs=1))
        for ids in generation:
            assert [lp.token for lp in generation.last_logprobs or ()] == list(ids)
        assert [lp.token for lp in generation.logprobs or ()] == [10, 11, 200002]
