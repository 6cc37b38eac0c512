"""Hugging Face transformers, in process: an own decode loop with a KV cache.

Why not ``model.generate``: the harmony mask must be applied to the logits at
every step, and a generation must stop within one step of a cancel. The loop
is the one ``generate`` runs for a single sequence (one forward over the
prompt keeping only the last logits, then one forward per token with the
cache), with the mask and sampling in between, so it is as fast.

The loop runs on one worker thread per engine, never on the event loop; ids
reach the loop through ``call_soon_threadsafe``. Generations on one engine run
one after another. Needs the ``transformers`` extra (torch and
transformers); both are imported when the engine is built.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import threading
from collections.abc import Callable
from typing import Any

from harmonia import EngineError, HarmonyError, InputError
from harmonia import vocabulary as vocab
from harmonia._errors import install_hint

from ._base import Constraint, Finish, FinishReason, SamplingParams, TokenLogprob, TokenMatcher
from ._generation import Emit, Producer, PromptEngine

__all__ = ["TransformersEngine"]

_NAME = "transformers"

#: What the worker posts to the event loop: an id (with its log-probability when
#: asked for), the finish, or its failure.
_Item = tuple[int, "TokenLogprob | None"] | Finish | BaseException
_Post = Callable[[_Item], None]


def _import(module: str) -> Any:
    """``torch`` or ``transformers``, or an EngineError that says how to install them."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineError(
            f"the transformers engine needs torch and transformers: {install_hint('transformers')}",
            engine=_NAME,
        ) from exc


def random_gpt_oss(seed: int = 0) -> Any:
    """A tiny, randomly initialised gpt-oss with the real 201,088-token vocabulary.

    The gpt-oss architecture (mixture of experts, attention sinks, a sliding
    window) at 2 layers and hidden size 64: about 26 M parameters, built from a
    config in well under a second, no download. It says nothing sensible, but
    with a harmony mask (or one allowed id per step: teacher forcing) it runs
    the real decode and masking path deterministically, which is what tests,
    benchmarks and demos of an engine need. ``seed`` seeds torch first.
    """
    torch = _import("torch")
    transformers = _import("transformers")
    torch.manual_seed(seed)
    config = transformers.GptOssConfig(
        vocab_size=vocab.GPT_OSS_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=128,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=vocab.ENDOFTEXT_ID,
        eos_token_id=vocab.RETURN_ID,
    )
    model: Any = transformers.GptOssForCausalLM(config)
    return model.eval()


class TransformersEngine(PromptEngine):
    """A transformers causal LM (gpt-oss or any other) decoding harmony ids.

    ``model`` is a loaded ``PreTrainedModel`` (put in eval mode); ``device``
    and ``dtype`` (e.g. ``"cuda"``, ``"bfloat16"``), when given, move it there
    (``None`` leaves it where it is). :meth:`from_pretrained` loads one, on the CPU in float32 by
    default. A :class:`~harmonia.engines.Constraint` is applied as a mask on
    the logits at every step (its matcher, or its grammar compiled with
    ``harmonia[constrained]``); ``top_p`` is applied after the mask.

    Log-probabilities (``SamplingParams.top_logprobs``) are the
    ``log_softmax`` of the model's logits at each step, before the
    constraint's mask, the temperature and top-p: the model's own
    distribution, as vLLM's default ``raw_logprobs`` reports it, so a
    constrained or teacher-forced id still shows how likely the model found it.

    .. code-block:: python

        engine = TransformersEngine.from_pretrained("openai/gpt-oss-20b", device="cuda",
                                                    dtype="bfloat16")
        generation = engine.generate(prompt_ids, SamplingParams(max_tokens=512))
    """

    name = _NAME
    supports_logprobs = True

    def __init__(self, model: Any, *, device: Any = None, dtype: Any = None) -> None:
        self._torch = _import("torch")
        torch = self._torch
        if isinstance(dtype, str):
            resolved = getattr(torch, dtype, None)
            if not isinstance(resolved, torch.dtype):
                raise InputError(f"unknown torch dtype {dtype!r} (try 'float32' or 'bfloat16')")
            dtype = resolved
        if device is not None or dtype is not None:
            model = model.to(device=device, dtype=dtype)
        self.model = model.eval()  # decoding needs eval mode (no dropout)
        self._closed = False
        self.device = next(model.parameters()).device
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="harmonia-transformers"
        )

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: Any = "cpu", dtype: Any = "float32", **kwargs: Any
    ) -> TransformersEngine:
        """Load a causal LM with ``AutoModelForCausalLM.from_pretrained(path, **kwargs)``."""
        transformers = _import("transformers")
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
        return cls(model, device=device, dtype=dtype)

    def _producer(
        self, ids: tuple[int, ...], params: SamplingParams, constraint: Constraint | None
    ) -> Producer:
        """Decoding after ``ids`` on the worker thread (a closed engine refuses here)."""
        if self._closed:
            raise EngineError("this transformers engine is closed (aclose)", engine=self.name)

        async def produce(emit: Emit) -> Finish:
            return await self._produce(ids, params, constraint, emit)

        return produce

    async def aclose(self) -> None:
        """Stop the worker thread (after the generation it runs, if any)."""
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def _produce(
        self,
        prompt: tuple[int, ...],
        params: SamplingParams,
        constraint: Constraint | None,
        emit: Emit,
    ) -> Finish:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[_Item] = asyncio.Queue()
        stop = threading.Event()

        def post(item: _Item) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
                loop.call_soon_threadsafe(inbox.put_nowait, item)

        job = self._executor.submit(self._decode, prompt, params, constraint, stop, post)
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, Finish):
                    return item
                if isinstance(item, HarmonyError) and not isinstance(item, EngineError):
                    raise EngineError(
                        f"the constraint cannot be used: {item}", engine=self.name
                    ) from item
                if isinstance(item, BaseException):
                    raise EngineError(
                        f"decoding failed: {type(item).__name__}: {item}", engine=self.name
                    ) from item
                token, logprob = item
                emit([token], None if logprob is None else [logprob])
        finally:
            # Cancelled, stopped by emit, or done: the worker sees `stop` before its
            # next step; wait for it so the model is free when this returns.
            stop.set()
            if not job.cancel():
                await asyncio.wait({asyncio.wrap_future(job)})

    # -- the worker thread ---------------------------------------------------------------

    def _decode(
        self,
        prompt: tuple[int, ...],
        params: SamplingParams,
        constraint: Constraint | None,
        stop: threading.Event,
        post: _Post,
    ) -> None:
        try:
            # Compiled here, not on the event loop: the first grammar of a process
            # also builds llguidance's tokenizer (about a second).
            matcher = constraint.new_matcher() if constraint is not None else None
            post(self._loop(prompt, params, matcher, stop, post))
        except BaseException as exc:
            post(exc)

    def _loop(
        self,
        prompt: tuple[int, ...],
        params: SamplingParams,
        matcher: TokenMatcher | None,
        stop: threading.Event,
        post: _Post,
    ) -> Finish:
        torch = self._torch
        model = self.model
        stops = frozenset(params.stop_token_ids)
        sampler = _Sampler(torch, params, self.device)
        mask = _Mask(torch, self.device) if matcher is not None else None
        with torch.inference_mode():
            if stop.is_set():
                return Finish(FinishReason.CANCELLED)
            inputs = torch.tensor([prompt], dtype=torch.long, device=self.device)
            # logits_to_keep=1: the prompt's other positions need no 201,088-wide logits.
            out = model(input_ids=inputs, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            for step in range(params.max_tokens):
                if stop.is_set():
                    return Finish(FinishReason.CANCELLED)
                logits = out.logits[0, -1].float()
                # Before the mask changes the logits in place: the model's own distribution.
                scores = None if params.top_logprobs is None else torch.log_softmax(logits, dim=-1)
                if mask is not None and matcher is not None:
                    mask.apply(matcher, logits)
                token = sampler.sample(logits)
                if matcher is not None:
                    matcher.consume(token)
                logprob = None
                if scores is not None and params.top_logprobs is not None:
                    logprob = _logprob(torch, scores, token, params.top_logprobs)
                post((token, logprob))
                if token in stops:
                    return Finish(FinishReason.STOP, stop_token=token)
                if matcher is not None and matcher.is_finished:
                    # The constraint's turn ended on an id the caller does not stop on.
                    return Finish(FinishReason.STOP, stop_token=token)
                if step + 1 == params.max_tokens:
                    break
                next_input = torch.tensor([[token]], dtype=torch.long, device=self.device)
                out = model(input_ids=next_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
        return Finish(FinishReason.LENGTH)


def _logprob(torch: Any, scores: Any, token: int, top: int) -> TokenLogprob:
    """``token``'s entry of one step's log-softmax, with the ``top`` most likely ids."""
    pairs: tuple[tuple[int, float], ...] = ()
    if top:
        values, ids = torch.topk(scores, top)  # sorted, most likely first
        pairs = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return TokenLogprob(token, float(scores[token]), pairs)


class _Mask:
    """The constraint's bitmask, applied to one row of logits (reused buffers)."""

    def __init__(self, torch: Any, device: Any) -> None:
        import numpy as np

        from harmonia.constrained import MASK_WORDS, mask_to_bool

        self._torch = torch
        self._device = device
        self._words = np.zeros(MASK_WORDS, dtype=np.int32)
        self._to_bool = mask_to_bool

    def apply(self, matcher: TokenMatcher, logits: Any) -> None:
        words = matcher.fill_mask(self._words)
        if not words.any():
            raise EngineError(
                "the constraint allows no token here (the matcher's mask is empty)",
                engine=_NAME,
            )
        allowed = self._torch.from_numpy(self._to_bool(words, logits.shape[-1]))
        allowed = allowed.to(self._device, non_blocking=True)
        logits.masked_fill_(~allowed, float("-inf"))


class _Sampler:
    """Greedy, or temperature then top-p, with the request's seed."""

    def __init__(self, torch: Any, params: SamplingParams, device: Any) -> None:
        self._torch = torch
        self._params = params
        self._generator = None
        if not params.greedy:
            generator = torch.Generator(device=device)
            if params.seed is None:
                generator.seed()  # a fresh random seed, not torch's fixed default
            else:
                generator.manual_seed(params.seed)
            self._generator = generator

    def sample(self, logits: Any) -> int:
        torch = self._torch
        params = self._params
        if params.greedy:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
            # Keep the smallest prefix whose mass reaches top_p (always the first id).
            sorted_probs[before >= params.top_p] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self._generator))
