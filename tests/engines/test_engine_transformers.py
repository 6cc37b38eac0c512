"""The in-process transformers engine on a random gpt-oss with the real vocabulary."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from harmonia import (
    Conversation,
    DeveloperContent,
    EngineError,
    HarmonyEncoding,
    Message,
    Role,
    StreamableParser,
    SystemContent,
)
from harmonia.engines import Constraint, FinishReason, SamplingParams
from random_model_steering import ForcedMatcher, LikesSpecialTokens
from tool_examples import WEATHER_TOOL

pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")

WEATHER = WEATHER_TOOL


def _conversation() -> Conversation:
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([WEATHER])
            ),
            Message.from_role_and_content(Role.USER, "Weather in Tokyo?"),
        ]
    )


@pytest.fixture(scope="module")
def prompt(enc: HarmonyEncoding) -> list[int]:
    return enc.render_conversation_for_completion(_conversation(), Role.ASSISTANT)


def test_greedy_matches_model_generate(
    transformers_engine: Any, gptoss_model: Any, prompt: list[int]
) -> None:
    import torch

    n = 24
    with torch.inference_mode():
        reference = gptoss_model.generate(
            torch.tensor([prompt]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=199_999,
        )[0, len(prompt) :].tolist()
    params = SamplingParams(max_tokens=n, temperature=0, stop_token_ids=())

    async def main() -> Any:
        return await transformers_engine.generate(prompt, params).result()

    completion = asyncio.run(main())
    assert list(completion.tokens) == reference
    assert completion.finish.reason is FinishReason.LENGTH
    assert completion.usage.completion_tokens == n
    assert completion.usage.prompt_tokens == len(prompt)


def test_seeded_sampling_repeats_and_seeds_differ(
    transformers_engine: Any, prompt: list[int]
) -> None:
    async def run(seed: int) -> tuple[int, ...]:
        params = SamplingParams(max_tokens=12, seed=seed, top_p=0.9)
        return (await transformers_engine.generate(prompt, params).result()).tokens

    async def main() -> list[tuple[int, ...]]:
        return [await run(1), await run(1), await run(2)]

    first, again, other = asyncio.run(main())
    assert first == again
    assert first != other


def test_a_tiny_top_p_keeps_only_the_most_likely_id(
    transformers_engine: Any, prompt: list[int]
) -> None:
    async def main() -> tuple[tuple[int, ...], tuple[int, ...]]:
        greedy = SamplingParams(max_tokens=10, temperature=0, stop_token_ids=())
        nucleus = SamplingParams(max_tokens=10, top_p=1e-6, seed=5, stop_token_ids=())
        first = (await transformers_engine.generate(prompt, greedy).result()).tokens
        second = (await transformers_engine.generate(prompt, nucleus).result()).tokens
        return first, second

    greedy, nucleus = asyncio.run(main())
    assert nucleus == greedy


def test_teacher_forcing_through_the_mask_path(
    transformers_engine: Any, prompt: list[int], enc: HarmonyEncoding
) -> None:
    script = [
        *enc.encode("<|channel|>analysis<|message|>", allowed_special="all"),
        *enc.encode_ordinary("The user wants the weather; call the tool."),
        *enc.encode(
            "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
            ' <|constrain|>json<|message|>{"city": "Tokyo"}<|call|>',
            allowed_special="all",
        ),
    ]
    forced = ForcedMatcher(script)

    async def main() -> Any:
        generation = transformers_engine.generate(
            prompt, SamplingParams(max_tokens=200), constraint=Constraint(matcher=forced)
        )
        return await generation.result()

    completion = asyncio.run(main())
    assert list(completion.tokens) == script
    assert completion.finish.reason is FinishReason.STOP
    assert completion.finish.stop_token == 200012
    assert forced.position == 0, "the caller's matcher must not be advanced"
    *_, call = enc.parse_messages_from_completion_tokens(completion.tokens, Role.ASSISTANT)
    assert call.recipient == "functions.get_weather"


def test_random_sampling_under_the_mask_always_parses(
    gptoss_model: Any, prompt: list[int], enc: HarmonyEncoding
) -> None:
    from harmonia.engines.transformers import TransformersEngine

    engine = TransformersEngine(LikesSpecialTokens(gptoss_model, boost=10.0))
    constraint = Constraint.from_conversation(_conversation())

    async def main() -> list[Any]:
        results = []
        for seed in range(6):
            params = SamplingParams(max_tokens=96, seed=seed)
            generation = engine.generate(prompt, params, constraint=constraint)
            results.append(await generation.result())
        await engine.aclose()
        return results

    endings = set()
    for completion in asyncio.run(main()):
        reason = completion.finish.reason
        assert reason in (FinishReason.STOP, FinishReason.LENGTH)
        if reason is FinishReason.STOP:
            # A whole turn: the strict parser reads it, ending in <|call|> or <|return|>.
            assert completion.tokens[-1] in (200002, 200012)
            messages = enc.parse_messages_from_completion_tokens(completion.tokens, Role.ASSISTANT)
            endings.add(messages[-1].recipient or "final")
        else:
            # Cut by the length limit: a strict streaming parse of the prefix never fails.
            assert len(completion.tokens) == 96
            parser = StreamableParser(enc, Role.ASSISTANT, strict=True)
            for token in completion.tokens:
                parser.process(token)
    assert endings, "with stop tokens boosted, some turns must end by themselves"


def test_cancel_is_seen_within_one_step(transformers_engine: Any, prompt: list[int]) -> None:
    # A forced script that never ends: the engine would decode until max_tokens.
    forced = ForcedMatcher([13] * 10_000)

    async def main() -> tuple[int, int, int]:
        generation = transformers_engine.generate(
            prompt,
            SamplingParams(max_tokens=10_000, temperature=0),
            constraint=Constraint(matcher=forced),
        )
        seen = 0
        async for ids in generation:
            seen += len(ids)
            if seen >= 3:
                break
        (matcher,) = forced.copies
        steps_before = matcher.mask_calls
        await generation.cancel()
        steps_after = matcher.mask_calls
        await asyncio.sleep(0.2)
        assert generation.finish is not None
        assert generation.finish.reason is FinishReason.CANCELLED
        return steps_before, steps_after, matcher.mask_calls

    before, after, later = asyncio.run(main())
    # At most the step in flight when cancel() was called completes; none after it returns.
    assert after - before <= 1
    assert later == after


def test_decoding_never_runs_on_the_event_loop(transformers_engine: Any, prompt: list[int]) -> None:
    threads: set[str] = set()
    forced = ForcedMatcher([13] * 8)
    original = forced.copy

    def copy() -> Any:
        twin = original()
        fill = twin.fill_mask

        def spy(out: Any = None) -> Any:
            threads.add(threading.current_thread().name)
            return fill(out)

        twin.fill_mask = spy  # type: ignore[method-assign]
        return twin

    forced.copy = copy  # type: ignore[method-assign]

    async def main() -> str:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        params = SamplingParams(max_tokens=8, temperature=0)
        await transformers_engine.generate(
            prompt, params, constraint=Constraint(matcher=forced)
        ).result()
        task.cancel()
        assert ticks > 1, "the event loop stayed responsive while decoding"
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert threads and loop_thread not in threads
    assert all(name.startswith("harmonia-transformers") for name in threads)


def test_a_model_failure_is_an_engine_error(prompt: list[int]) -> None:
    from harmonia.engines.transformers import TransformersEngine

    class Broken:
        def __init__(self, model: Any) -> None:
            self._model = model

        def parameters(self) -> Any:
            return self._model.parameters()

        def eval(self) -> Broken:
            return self

        def __call__(self, **kwargs: Any) -> Any:
            raise RuntimeError("CUDA error: out of memory (simulated)")

    import torch

    engine = TransformersEngine(Broken(torch.nn.Linear(2, 2)))

    async def main() -> None:
        generation = engine.generate(prompt, SamplingParams(max_tokens=4))
        with pytest.raises(EngineError, match="out of memory"):
            async for _ in generation:
                pass
        assert generation.finish is not None
        assert generation.finish.reason is FinishReason.ERROR
        await engine.aclose()

    asyncio.run(main())


def test_a_grammar_that_does_not_compile_is_an_engine_error(
    transformers_engine: Any, prompt: list[int]
) -> None:
    async def main() -> None:
        generation = transformers_engine.generate(
            prompt, SamplingParams(max_tokens=4), constraint=Constraint(grammar="start: nope(")
        )
        with pytest.raises(EngineError, match="the constraint cannot be used"):
            await generation.result()

    asyncio.run(main())


def test_logprobs_are_the_models_log_softmax_for_teacher_forced_ids(
    transformers_engine: Any, gptoss_model: Any, prompt: list[int]
) -> None:
    import torch

    script = [200005, 35644, 200008, 1008, 2201, 3, 200007]
    params = SamplingParams(max_tokens=len(script), temperature=0.7, top_logprobs=5)

    async def main() -> Any:
        generation = transformers_engine.generate(
            prompt, params, constraint=Constraint(matcher=ForcedMatcher(script))
        )
        return await generation.result()

    completion = asyncio.run(main())
    assert list(completion.tokens) == script
    with torch.inference_mode():
        logits = gptoss_model(input_ids=torch.tensor([prompt + script[:-1]])).logits[0].float()
    # The distribution before the mask and the temperature: the model's own.
    expected = torch.log_softmax(logits[len(prompt) - 1 :], dim=-1)
    assert [lp.token for lp in completion.logprobs] == script
    for step, lp in enumerate(completion.logprobs):
        assert lp.logprob == pytest.approx(float(expected[step, lp.token]), abs=1e-4)
        values, ids = torch.topk(expected[step], 5)
        assert [t for t, _ in lp.top] == ids.tolist()
        assert [v for _, v in lp.top] == pytest.approx(values.tolist(), abs=1e-4)
        tops = [v for _, v in lp.top]
        assert tops == sorted(tops, reverse=True)
        assert sum(math.exp(v) for v in tops) <= 1.0 + 1e-6
        # A forced id is rarely the model's favourite: its logprob is below the best one.
        assert lp.logprob <= lp.top[0][1] + 1e-6


def test_no_logprobs_cost_unless_asked(transformers_engine: Any, prompt: list[int]) -> None:
    async def main() -> Any:
        params = SamplingParams(max_tokens=2, temperature=0)
        return await transformers_engine.generate(prompt, params).result()

    assert asyncio.run(main()).logprobs is None
