"""The limits of one agent run, with their defaults (the only place they live)."""

from __future__ import annotations

from dataclasses import dataclass

from harmonia._errors import InputError, check_int
from harmonia._options import option
from harmonia._runtime import TIMEOUTS

#: Generations (model steps) per run: a tool-using turn rarely needs more.
DEFAULT_MAX_STEPS = 16
#: Completion tokens per run, over all its steps.
DEFAULT_MAX_TOKENS = 32_768
#: Wall-clock seconds per run, tool calls included.
DEFAULT_MAX_SECONDS = TIMEOUTS.agent_run


@dataclass(frozen=True, slots=True)
class AgentLimits:
    """When a run stops even though the model has not answered.

    * ``max_steps``: generations, one per model step (a step ends at a tool
      call or at the answer);
    * ``max_tokens``: completion tokens summed over the steps (each step's
      ``SamplingParams.max_tokens`` is lowered to what is left);
    * ``max_seconds``: wall time from the start of the run, tools included
      (``None``: no limit);
    * ``context_tokens``: the model's context window (``None``: not known). Each
      step's prompt grows by the last step's output and tool reply, so each
      step's ``max_tokens`` is also lowered to what the window leaves after its
      prompt, and a prompt that fills the window ends the run (``LENGTH``)
      rather than a request the engine would refuse.

    >>> AgentLimits(max_steps=4).max_tokens
    32768
    >>> AgentLimits(max_steps=0)
    Traceback (most recent call last):
    ...
    harmonia._errors.InputError: AgentLimits.max_steps must be an int >= 1, not 0
    """

    max_steps: int = option(DEFAULT_MAX_STEPS, help="generations per answer")
    max_tokens: int = option(DEFAULT_MAX_TOKENS, help="sampled tokens per answer")
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        check_int("AgentLimits.max_steps", self.max_steps, minimum=1)
        check_int("AgentLimits.max_tokens", self.max_tokens, minimum=1)
        check_int("AgentLimits.context_tokens", self.context_tokens, minimum=1, optional=True)
        seconds = self.max_seconds
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0
        ):
            raise InputError(f"AgentLimits.max_seconds must be > 0 or None, not {seconds!r}")

    def budget(self, prompt_tokens: int, spent: int = 0) -> int:
        """The most tokens the next generation may sample: what ``max_tokens`` leaves after
        ``spent``, cut to what the context window leaves after a prompt of
        ``prompt_tokens``. Zero or less: nothing fits.

        The one place a generation's token budget is computed: the agent loop asks
        here before every step, and the server (``harmonia.serve.Turn``) asks here for
        a request's ``max_tokens``, so the two cannot disagree.

        >>> AgentLimits(max_tokens=100, context_tokens=120).budget(50)
        70
        >>> AgentLimits(max_tokens=100, context_tokens=120).budget(50, spent=40)
        60
        >>> AgentLimits(max_tokens=100, context_tokens=120).budget(120)
        0
        """
        left = self.max_tokens - spent
        if self.context_tokens is None:
            return left
        return min(left, self.context_tokens - prompt_tokens)
