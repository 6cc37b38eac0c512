"""What every engine takes and says: sampling parameters, constraints, finish reasons.

An engine turns prompt token ids into sampled token ids. harmonia renders the
prompt itself (byte-exact harmony), so engines never see text: ids go in, ids
come out, one chunk at a time, and the engine says why it stopped. The
protocol is :class:`Engine`; the running generation is a
:class:`~harmonia.engines.Generation`.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from harmonia import EngineError, InputError
from harmonia._names import DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from harmonia.vocabulary import ACTION_STOP_IDS

if TYPE_CHECKING:
    from harmonia import Conversation
    from harmonia.constrained import GrammarOptions

    from ._generation import Generation

#: The most alternatives a request may ask for per token (OpenAI's and vLLM's limit).
MAX_TOP_LOGPROBS: Final = 20

#: ``<|return|>`` (200002) and ``<|call|>`` (200012): the tokens that end an
#: assistant turn (``HarmonyEncoding.stop_tokens_for_assistant_actions()``).
HARMONY_STOP_TOKEN_IDS: Final = ACTION_STOP_IDS


class UnsupportedConstraintError(EngineError, InputError):
    """The engine cannot enforce the constraint it was given (nothing was sent).

    Raised instead of generating unconstrained: a constraint is never dropped
    silently. The message names the engine and what it could not enforce.
    """


class EngineRefusedError(EngineError):
    """The engine's server refused the request with an HTTP error status (``status``).

    A 4xx usually means the request itself was wrong for that server (a grammar or
    schema it cannot compile, a prompt over its context); ``harmonia serve`` answers
    those with a 400 naming the engine and its reason, and anything else with a 502.
    """

    def __init__(
        self, message: str, *, status: int, engine: str | None = None, url: str | None = None
    ) -> None:
        super().__init__(message, engine=engine, url=url)
        self.status = status


class UnsupportedParameterError(EngineError, InputError):
    """The engine cannot do what a sampling parameter asks (nothing was sent).

    Raised by ``generate`` (e.g. log-probabilities from an engine that cannot
    give them) rather than ignoring the parameter; the message names the engine.
    ``harmonia serve`` answers it with a 400.
    """


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The log-probability of one sampled id, and the most likely ids at its step.

    ``token`` is the sampled id, ``logprob`` its natural log-probability;
    ``top`` holds up to ``SamplingParams.top_logprobs`` ``(id, logprob)``
    pairs, most likely first (the sampled id among them when it is that
    likely). Engines report the model's own distribution at the step: the
    softmax of its logits before temperature and top-p (vLLM's default
    ``raw_logprobs``, llama.cpp's ``n_probs`` without ``post_sampling_probs``),
    so the numbers do not depend on how the id was picked.

    >>> TokenLogprob(5, -0.5, ((5, -0.5), (7, -1.5))).top[1]
    (7, -1.5)
    """

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.token, bool) or not isinstance(self.token, int) or self.token < 0:
            raise InputError(f"TokenLogprob.token must be a token id, not {self.token!r}")
        if math.isnan(self.logprob):
            raise InputError("TokenLogprob.logprob is NaN")
        # log_softmax can round to a hair above 0; a log-probability never is.
        object.__setattr__(self, "logprob", min(float(self.logprob), 0.0))
        # A list given by the caller becomes our own tuple of (int, float) pairs.
        top = tuple((int(token), min(float(logprob), 0.0)) for token, logprob in self.top)
        object.__setattr__(self, "top", top)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample; every engine reads the same fields, with these defaults.

    * ``max_tokens``: at most this many new tokens (a random or looping model
      never stops by itself, so there is always a bound);
    * ``temperature``: ``0`` is greedy; gpt-oss is meant to be sampled at 1.0;
    * ``top_p``: nucleus sampling, applied after the temperature (1.0: off);
    * ``seed``: makes sampling repeatable where the engine supports it
      (``None``: the engine's own randomness);
    * ``stop_token_ids``: generation ends right after any of these ids, which
      is yielded (harmony's ``<|return|>`` and ``<|call|>`` by default);
    * ``top_logprobs``: ``None`` (the default) asks for no log-probabilities;
      ``0`` to ``20`` asks for each sampled id's :class:`TokenLogprob` with that
      many most likely alternatives (:attr:`Generation.logprobs`). An engine
      that cannot give them raises :class:`UnsupportedParameterError`.

    >>> SamplingParams(max_tokens=64, temperature=0).top_p
    1.0
    >>> SamplingParams(temperature=-1)
    Traceback (most recent call last):
    ...
    harmonia._errors.InputError: SamplingParams.temperature must be >= 0, not -1
    """

    max_tokens: int = 4096
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = HARMONY_STOP_TOKEN_IDS
    top_logprobs: int | None = None

    def __post_init__(self) -> None:
        def bad(name: str, rule: str, value: object) -> InputError:
            return InputError(f"SamplingParams.{name} must be {rule}, not {value!r}")

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise bad("max_tokens", "an int", self.max_tokens)
        if self.max_tokens < 1:
            raise bad("max_tokens", ">= 1", self.max_tokens)
        if not self.temperature >= 0:  # also refuses NaN
            raise bad("temperature", ">= 0", self.temperature)
        if not 0 < self.top_p <= 1:
            raise bad("top_p", "in (0, 1]", self.top_p)
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise bad("seed", "an int or None", self.seed)
        stops = tuple(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in stops):
            raise bad("stop_token_ids", "token ids (ints >= 0)", self.stop_token_ids)
        # A list passed by the caller becomes our own tuple: frozen means frozen.
        object.__setattr__(self, "stop_token_ids", stops)
        top = self.top_logprobs
        if top is not None and (
            isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS
        ):
            raise bad("top_logprobs", f"None or an int in 0..{MAX_TOP_LOGPROBS}", top)

    @property
    def logprobs(self) -> bool:
        """True when log-probabilities are asked for (``top_logprobs`` is not ``None``)."""
        return self.top_logprobs is not None

    @property
    def greedy(self) -> bool:
        """True when ``temperature`` is 0 (argmax decoding)."""
        return self.temperature == 0


class FinishReason(str, enum.Enum):
    """Why a generation ended."""

    #: A stop token was sampled (:attr:`Finish.stop_token` says which).
    STOP = "stop"
    #: ``max_tokens`` were generated.
    LENGTH = "length"
    #: The caller cancelled it.
    CANCELLED = "cancelled"
    #: The engine failed (:attr:`Finish.message` says how).
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Finish:
    """How a generation ended: the reason, the stop token, the error message."""

    reason: FinishReason
    stop_token: int | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one generation."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished generation: every sampled id, why it ended, the counts.

    ``logprobs`` runs parallel to ``tokens`` when they were asked for
    (``SamplingParams.top_logprobs``), else it is ``None``.
    """

    tokens: tuple[int, ...]
    finish: Finish
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] | None = None


@runtime_checkable
class TokenMatcher(Protocol):
    """The in-process mask interface (:class:`harmonia.constrained.TurnMatcher` has it).

    ``fill_mask(out)`` writes the int32 bitmask of allowed next ids (bit
    ``i % 32`` of word ``i // 32``) into ``out``; ``consume`` advances past a
    sampled id; ``copy`` gives an independent matcher in the same state.
    """

    @property
    def is_finished(self) -> bool: ...

    def fill_mask(self, out: Any = None) -> Any: ...

    def consume(self, token: int) -> None: ...

    def copy(self) -> TokenMatcher: ...


@dataclass(frozen=True)
class Constraint:
    """What the sampled ids must follow: a grammar, a matcher, or both.

    In-process engines apply a :class:`TokenMatcher`'s mask to the logits at
    every step; remote engines send ``grammar`` (Lark text in llguidance's
    dialect, from :func:`harmonia.constrained.build_turn_grammar`) to the
    server. Build it from the conversation the prompt was rendered from::

        constraint = Constraint.from_conversation(conversation)

    ``matcher`` is a template: each generation works on its own ``copy()``,
    so the caller's matcher is never advanced. Without a matcher, in-process
    engines compile ``grammar`` (needs ``harmonia[constrained]``).
    """

    grammar: str | None = None
    matcher: TokenMatcher | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.grammar is None and self.matcher is None:
            raise InputError("a Constraint needs a grammar, a matcher, or both")
        if self.grammar is not None and not isinstance(self.grammar, str):
            raise InputError(f"Constraint.grammar must be str, not {type(self.grammar).__name__}")
        if self.matcher is not None and not isinstance(self.matcher, TokenMatcher):
            raise InputError(
                "Constraint.matcher must have fill_mask, consume, copy and is_finished "
                f"(like harmonia.constrained.TurnMatcher), not {type(self.matcher).__name__}"
            )

    @classmethod
    def from_conversation(
        cls, conversation: Conversation, options: GrammarOptions | None = None
    ) -> Constraint:
        """The grammar of the assistant turn that continues ``conversation``.

        Only the grammar text is built here (no llguidance needed); in-process
        engines compile it when they start.
        """
        from harmonia.constrained import build_turn_grammar

        return cls(grammar=build_turn_grammar(conversation, options))

    def new_matcher(self) -> TokenMatcher:
        """A fresh matcher at the start of the turn (a copy of the template, or compiled)."""
        if self.matcher is not None:
            return self.matcher.copy()
        from harmonia.constrained import TurnMatcher

        assert self.grammar is not None  # __post_init__
        return TurnMatcher(self.grammar)

    def require_grammar(self, engine: str, url: str | None = None) -> str:
        """The grammar text, or :class:`UnsupportedConstraintError` for a matcher-only one."""
        if self.grammar is None:
            raise UnsupportedConstraintError(
                f"{engine} runs out of process and can enforce a constraint only as a grammar; "
                "this Constraint has only an in-process matcher. Build it with "
                "Constraint.from_conversation(...) or Constraint(grammar=...)",
                engine=engine,
                url=url,
            )
        return self.grammar


@runtime_checkable
class Engine(Protocol):
    """The least an engine implements.

    ``generate`` starts one generation (it must be called with an event loop
    running: the engine starts work at once) and returns its
    :class:`~harmonia.engines.Generation` handle; ``aclose`` releases the
    engine's connections or threads. ``name`` names the engine in errors.

    An engine that gives log-probabilities (``SamplingParams.top_logprobs``)
    says so with a class attribute ``supports_logprobs = True`` (all of
    harmonia's do); one without it is taken not to, and ``harmonia serve``
    refuses such requests with a 400 naming it.
    """

    name: str

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        constraint: Constraint | None = None,
    ) -> Generation: ...

    async def aclose(self) -> None: ...


def refuse_logprobs(params: SamplingParams, engine: str) -> None:
    """:class:`UnsupportedParameterError` when ``params`` ask for log-probabilities.

    For engines (and engine setups) that cannot give them: the request fails
    before anything is sent instead of being answered without them.
    """
    if params.logprobs:
        raise UnsupportedParameterError(
            f"the {engine} engine cannot return log-probabilities; "
            "leave SamplingParams.top_logprobs as None",
            engine=engine,
        )


def check_prompt(prompt: Sequence[int], engine: str) -> tuple[int, ...]:
    """The prompt as a tuple of ids, or :class:`~harmonia.InputError`."""
    given = tuple(prompt)
    # A rendered prompt (plain non-negative ints) is checked at C speed: id by id, a
    # prompt of 30,000 ids cost milliseconds of the server's CPU per request.
    if given and set(map(type, given)) == {int} and min(given) >= 0:
        return given
    return _check_each(given, engine)


def _check_each(prompt: Sequence[int], engine: str) -> tuple[int, ...]:
    """:func:`check_prompt` id by id: numpy and torch ints converted, the first bad one named."""
    ids: list[int] = []
    for i, token in enumerate(prompt):
        try:
            # bool is an int subclass but never a token id.
            value = None if isinstance(token, bool) else operator.index(token)  # numpy, torch ints
        except TypeError:
            value = None
        if value is None:
            raise InputError(f"{engine}: prompt[{i}] is {token!r}, not a token id")
        if value < 0:
            raise InputError(f"{engine}: prompt[{i}] is {value}, not a token id")
        ids.append(value)
    if not ids:
        raise InputError(f"{engine}: the prompt is empty; render a conversation first")
    return tuple(ids)
