"""The training policy: which tokens of a rendered conversation get loss.

A mask is a pure function of the renderer's provenance (which message and part
produced each token) and this policy; nothing here looks at token ids. Every
default lives in :class:`TrainPolicy`'s field defaults, and every stack we know is
a named preset in :data:`PRESETS` (docs/training.md sets them side by side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Final, Literal, get_args

from harmonia import InputError
from harmonia._errors import check_choice
from harmonia.vocabulary import CHANNELS as CHANNELS
from harmonia.vocabulary import COT_POLICY_NAMES, FINAL, CotPolicyName

TurnsMode = Literal["faithful", "expand", "all", "last"]
FinalEnd = Literal["return", "end"]
Overflow = Literal["drop", "truncate", "trim-history", "error"]

TURNS_MODES: Final[tuple[TurnsMode, ...]] = get_args(TurnsMode)
FINAL_ENDS: Final[tuple[FinalEnd, ...]] = get_args(FinalEnd)
OVERFLOWS: Final[tuple[Overflow, ...]] = get_args(Overflow)


@dataclass(frozen=True)
class TrainPolicy:
    """Which tokens are trained. Frozen; ``to_dict``/``from_dict`` round-trip.

    * ``channels``: assistant channels whose messages are trained.
    * ``tool_calls``: train assistant messages with a recipient (they end ``<|call|>``).
    * ``headers``: train a trained message's recipient, channel, content type and
      ``<|message|>``.
    * ``inner_start``: train the ``<|start|>assistant`` the model writes itself after
      its own ``<|end|>`` inside a turn.
    * ``turn_start``: train the ``<|start|>assistant`` the harness writes at the start
      of a turn and after a tool result (TRL does; the model never writes it).
    * ``terminators``: train the ``<|end|>``, ``<|call|>`` or ``<|return|>`` of a
      trained message.
    * ``end_after_final``: train the ``<|end|>`` that closes a final answer earlier
      in the conversation (the history's rewrite of the ``<|return|>`` the model
      wrote; TRL, Unsloth and Megatron-Bridge train it).
    * ``final_end``: a conversation ending with a final answer ends ``<|return|>``
      (the reference, TRL) or ``<|end|>`` (Unsloth's template).
    * ``cot``: which earlier ``analysis`` messages the sequence keeps, by the
      renderer's policies (``harmonia.COT_POLICIES``, one definition for inference
      and training): ``guide`` (drop the reasoning of turns before the last that a
      final concluded), ``reference`` (openai-harmony 0.0.8's
      ``render_conversation_for_training``), ``hf`` (the gpt-oss Hugging Face chat
      template) or ``keep_all``.
    * ``turns``: ``faithful`` trains a message only when the tokens before it are
      what the model saw when it wrote it; ``expand`` adds one sample per turn
      that would otherwise be left out; ``all`` trains every assistant message;
      ``last`` only the last turn.
    * ``weights``: honour per-message weights (``weight: 0`` is never trained).
    * ``full_sequence``: every token is trained, context included.
    * ``max_length`` / ``overflow``: what to do with a longer sample: ``drop`` it,
      ``truncate`` it (keep the start), ``trim-history`` (leave out whole earliest
      exchanges, keeping system and developer messages, until it fits) or raise an
      ``error``.

    >>> TrainPolicy.from_dict(PRESETS["trl"].to_dict()) == PRESETS["trl"]
    True
    """

    channels: tuple[str, ...] = CHANNELS
    tool_calls: bool = True
    headers: bool = True
    inner_start: bool = True
    turn_start: bool = False
    terminators: bool = True
    end_after_final: bool = False
    final_end: FinalEnd = "return"
    cot: CotPolicyName = "guide"  # the renderer's policies (harmonia._render.cot)
    turns: TurnsMode = "faithful"
    weights: bool = True
    full_sequence: bool = False
    max_length: int | None = None
    overflow: Overflow = "drop"

    def __post_init__(self) -> None:
        check_choice(self.cot, COT_POLICY_NAMES, "cot")
        check_choice(self.turns, TURNS_MODES, "turns")
        check_choice(self.final_end, FINAL_ENDS, "final_end")
        check_choice(self.overflow, OVERFLOWS, "overflow")
        if isinstance(self.channels, str) or not all(isinstance(c, str) for c in self.channels):
            raise InputError(
                f"channels must be a tuple of channel names, got {self.channels!r}: "
                "e.g. ('analysis', 'commentary', 'final')"
            )
        object.__setattr__(self, "channels", tuple(self.channels))
        if self.max_length is not None and (
            not isinstance(self.max_length, int) or self.max_length < 1
        ):
            raise InputError(f"max_length must be a positive integer, got {self.max_length!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the manifest stores it)."""
        return {**asdict(self), "channels": list(self.channels)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainPolicy:
        """The policy of :meth:`to_dict`; unknown keys are an error, missing ones default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(
                f"unknown policy field(s) {', '.join(unknown)}: "
                f"known are {', '.join(sorted(known))}"
            )
        values = dict(data)
        if "channels" in values:
            values["channels"] = tuple(values["channels"])
        return cls(**values)

    def with_(self, **changes: Any) -> TrainPolicy:
        """A copy with some fields changed (``policy.with_(turns="expand")``)."""
        try:
            return replace(self, **changes)
        except TypeError as exc:
            raise InputError(f"cannot change the policy: {exc}") from None


#: Each stack's behaviour as a policy (docs/training.md compares them).
PRESETS: Final[Mapping[str, TrainPolicy]] = {
    # The rule of docs/training.md: model-written tokens only, in faithful context.
    "harmony": TrainPolicy(),
    # TRL assistant_only_loss with its gptoss_training.jinja: the generation block wraps
    # the whole assistant message, the harness-written <|start|>assistant included.
    "trl": TrainPolicy(turn_start=True, end_after_final=True, cot="hf", turns="all"),
    # Unsloth's notebook: train_on_responses_only after "<|channel|>final<|message|>".
    "final-only": TrainPolicy(
        channels=(FINAL,),
        tool_calls=False,
        headers=False,
        inner_start=False,
        end_after_final=True,
        cot="hf",
        turns="all",
    ),
    # Megatron-Bridge loss_mode=assistant: from <|channel|> to the terminator, every
    # channel; <|start|>assistant is never trained.
    "megatron": TrainPolicy(inner_start=False, end_after_final=True, cot="hf", turns="all"),
    # Megatron-Bridge loss_mode=last_turn (also Axolotl's advice, LLaMA-Factory mask_history).
    "last-turn": TrainPolicy(inner_start=False, end_after_final=True, cot="hf", turns="last"),
    # The cookbook article: no masking at all.
    "full": TrainPolicy(cot="hf", turns="all", full_sequence=True),
}


def resolve_policy(policy: TrainPolicy | str | None) -> TrainPolicy:
    """A policy, a preset's name, or ``None`` for the default."""
    if policy is None:
        return PRESETS["harmony"]
    if isinstance(policy, TrainPolicy):
        return policy
    check_choice(policy, PRESETS, "policy preset")
    return PRESETS[policy]
