"""The logits-processor adapters: vLLM's per-request callable and V1 class, transformers.

The numpy tests cover every adapter's logic; torch and transformers tests run
when those packages are installed (a tiny GPT-2 is built from a config, no
download). vLLM cannot run here: its V1 class is tested against a stand-in
``AdapterLogitsProcessor`` that follows vLLM's documented contract (per-request
processors, called with a live reference to the request's output token ids).
"""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any

import numpy as np
import pytest

import harmonia as h
from harmonia import InputError, Role
from harmonia._tokenizer import special_tokens as st

pytest.importorskip("llguidance")

from constrained_cases import CASES, check_turn

from harmonia.constrained import (
    VLLM_EXTRA_ARG,
    HarmonyLogitsProcessor,
    TransformersLogitsProcessor,
    TurnMatcher,
    build_turn_grammar,
    mask_logits,
    vllm_logits_processor_class,
)

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
VOCAB = 201_088  # gpt-oss's logits: o200k_harmony without its last reserved id


def biased_logits(rng: np.random.Generator, size: int = VOCAB) -> np.ndarray:
    """Random logits: Gumbel noise, special tokens and short tokens pushed up so turns end."""
    logits = rng.gumbel(size=size).astype(np.float32)
    logits[st.FIRST_SPECIAL :] += rng.uniform(6.0, 14.0)
    logits[:1000] += rng.uniform(2.0, 7.0)  # bytes and short pieces: quotes, brackets
    return logits


def generate(processor: HarmonyLogitsProcessor, rng: np.random.Generator) -> list[int]:
    """What an engine does: call the processor, take the argmax, append it."""
    output: list[int] = []
    while not output or output[-1] not in (st.CALL, st.RETURN):
        assert len(output) < 3000, "turn did not end"
        logits = processor(output, biased_logits(rng))
        output.append(int(np.argmax(logits)))
    return output


# -- the per-request processor (vLLM V0 and what V1's adapter wraps) ----------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_per_request_processor_with_full_random_logits(name: str) -> None:
    case = CASES[name]
    rng = np.random.default_rng(5)
    for _ in range(3):
        processor = HarmonyLogitsProcessor(case.matcher())
        check_turn(case, generate(processor, rng))


def test_processor_masks_in_place_and_leaves_a_finished_turn_alone() -> None:
    processor = HarmonyLogitsProcessor(CASES["functions"].matcher())
    logits = np.zeros(VOCAB, dtype=np.float32)
    assert processor([], logits) is logits
    assert (
        np.flatnonzero(np.isfinite(logits)).tolist() == processor.matcher.allowed_tokens().tolist()
    )
    done = ENC.encode("<|channel|>final<|message|>ok<|return|>", allowed_special="all")
    untouched = np.zeros(VOCAB, dtype=np.float32)
    processor([*done, 5, 6], untouched)  # an engine that did not stop: ignored
    assert np.isfinite(untouched).all()


def test_processor_follows_rewinds() -> None:
    processor = HarmonyLogitsProcessor(CASES["functions"].matcher())
    turn = ENC.encode("<|channel|>analysis<|message|>a b c", allowed_special="all")
    processor(turn, np.zeros(VOCAB, dtype=np.float32))
    processor(turn[:2], np.zeros(VOCAB, dtype=np.float32))  # e.g. speculative tokens refused
    assert processor.matcher.tokens == tuple(turn[:2])


def test_mask_logits_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        mask_logits([0.0] * VOCAB, np.zeros(10, dtype=np.int32))


# -- vLLM V1 ---------------------------------------------------------------------------------------


class _StandInAdapter:
    """vLLM's ``AdapterLogitsProcessor`` contract, as its documentation describes it."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self.requests: dict[int, Any] = {}

    def update_state(self, added: list[tuple[int, Any, list[int], list[int]]]) -> None:
        for index, params, _prompt, output in added:
            processor = self.new_req_logits_processor(params)  # type: ignore[attr-defined]
            if processor is not None:
                self.requests[index] = (processor, output)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        for index, (processor, output) in self.requests.items():
            logits[index] = processor(output, logits[index])
        return logits


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("vllm.v1.sample.logits_processor")
    module.AdapterLogitsProcessor = _StandInAdapter  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.sample"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.logits_processor", module)
    vllm_logits_processor_class.cache_clear()
    yield module
    vllm_logits_processor_class.cache_clear()


def _params(**extra: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(extra_args=extra or None)


def test_vllm_v1_class_masks_only_requests_with_a_grammar(fake_vllm: types.ModuleType) -> None:
    cls = vllm_logits_processor_class()
    assert issubclass(cls, _StandInAdapter) and cls.__qualname__ == "HarmonyLogitsProcessor"
    from harmonia.constrained import vllm as entry_point

    assert entry_point.HarmonyLogitsProcessor is cls
    assert pickle.loads(pickle.dumps(cls)) is cls  # vLLM may send it to engine processes
    grammar = build_turn_grammar(CASES["functions"].conversation)
    processor = cls(None, "cpu", False)
    assert processor.is_argmax_invariant() is False
    outputs: list[list[int]] = [[], []]
    processor.update_state(
        [(0, _params(**{VLLM_EXTRA_ARG: grammar}), [], outputs[0]), (1, _params(), [], outputs[1])]
    )
    rng = np.random.default_rng(9)
    while not outputs[0] or outputs[0][-1] not in (st.CALL, st.RETURN):
        assert len(outputs[0]) < 3000
        batch = np.stack([biased_logits(rng), biased_logits(rng)])
        processor.apply(batch)
        assert np.isfinite(batch[1]).all()  # the other request is untouched
        for row, output in enumerate(outputs):
            output.append(int(np.argmax(batch[row])))  # vLLM appends in place
    check_turn(CASES["functions"], outputs[0])


def test_vllm_v1_validates_request_arguments(fake_vllm: types.ModuleType) -> None:
    cls = vllm_logits_processor_class()
    cls.validate_params(_params())
    cls.validate_params(
        _params(**{VLLM_EXTRA_ARG: build_turn_grammar(CASES["builtins"].conversation)})
    )
    with pytest.raises(ValueError):
        cls.validate_params(_params(**{VLLM_EXTRA_ARG: 42}))
    with pytest.raises(InputError):  # a ValueError, which vLLM reports as a bad request
        cls.validate_params(_params(**{VLLM_EXTRA_ARG: "start: nonsense"}))


def test_vllm_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    vllm_logits_processor_class.cache_clear()
    from harmonia.constrained import ConstrainedUnavailableError
    from harmonia.constrained import vllm as entry_point

    with pytest.raises(ConstrainedUnavailableError, match="vllm"):
        entry_point.HarmonyLogitsProcessor  # noqa: B018
    with pytest.raises(AttributeError):
        entry_point.Nothing  # noqa: B018
    vllm_logits_processor_class.cache_clear()


# -- torch and transformers ------------------------------------------------------------------------


def test_mask_logits_on_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    matcher = CASES["functions"].matcher()
    mask = matcher.fill_mask()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        logits = torch.zeros(VOCAB, dtype=dtype)
        assert mask_logits(logits, mask) is logits
        finite = torch.isfinite(logits).nonzero().flatten().tolist()
        assert finite == matcher.allowed_tokens().tolist()


def test_transformers_generate_with_a_tiny_model() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=st.N_VOCAB, n_positions=1024, n_embd=16, n_layer=1, n_head=2
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    case = CASES["response_format"]
    prompt = ENC.render_conversation_for_completion(case.conversation, Role.ASSISTANT)
    turn_end = ENC.stop_tokens_for_assistant_actions()

    class PushSpecials:
        """An untrained model almost never picks a stop token; make it likelier."""

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            scores[:, st.FIRST_SPECIAL :] += 12.0
            scores[:, :256] += 6.0
            return scores

    processor = TransformersLogitsProcessor(
        TurnMatcher.from_conversation(case.conversation, case.options)
    )
    output = model.generate(
        torch.tensor([prompt, prompt]),
        attention_mask=torch.ones(2, len(prompt), dtype=torch.long),
        logits_processor=transformers.LogitsProcessorList([PushSpecials(), processor]),
        do_sample=True,
        max_new_tokens=400,
        eos_token_id=turn_end,
        pad_token_id=st.ENDOFTEXT,
    )
    for row in output.tolist():
        turn = row[len(prompt) :]
        while turn and turn[-1] == st.ENDOFTEXT:  # padding after the shorter row ended
            turn.pop()
        assert turn[-1] in turn_end, "turn did not end in 400 tokens"
        check_turn(case, turn)


def test_transformers_processor_with_numpy_rows() -> None:
    # The logic without torch: rows of a numpy batch, prompt length from the first call.
    case = CASES["builtins"]
    processor = TransformersLogitsProcessor(case.matcher())
    prompt = ENC.render_conversation_for_completion(case.conversation, Role.ASSISTANT)
    rng = np.random.default_rng(2)
    ids = np.array([prompt, prompt])
    done = [False, False]
    while not all(done):
        assert ids.shape[1] - len(prompt) < 3000
        scores = np.stack([biased_logits(rng), biased_logits(rng)])
        processor(ids, scores)
        picked = scores.argmax(axis=1)
        for row in range(2):
            if done[row]:
                picked[row] = st.ENDOFTEXT  # what transformers pads finished rows with
            done[row] = done[row] or int(picked[row]) in (st.CALL, st.RETURN)
        ids = np.concatenate([ids, picked[:, None]], axis=1)
    for row in ids.tolist():
        turn = row[len(prompt) :]
        while turn[-1] == st.ENDOFTEXT:
            turn.pop()
        check_turn(case, turn)
    processor.reset()
    assert processor(ids[:, : len(prompt)], np.zeros((2, VOCAB), dtype=np.float32)) is not None
