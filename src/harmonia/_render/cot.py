"""Chain-of-thought policies: which earlier ``analysis`` messages a prompt keeps.

* ``"reference"`` -- what ``openai_harmony`` does with ``auto_drop_analysis=True``:
  when the last assistant message is on the ``final`` channel, drop the
  ``analysis`` messages (any role) that come before the *first* ``final``
  message. Later turns' analysis is kept.
* ``"guide"`` -- the harmony guide's rule: drop every ``analysis`` message that a
  later ``final`` assistant message concluded; keep the analysis of the current,
  unfinished turn (e.g. one still calling tools), which the model needs.
* ``"keep_all"`` -- drop nothing (the reference's ``auto_drop_analysis=False``).

A training sequence (``render_conversation_for_training``) teaches the last turn,
reasoning included: under ``"guide"`` it keeps the analysis of its last assistant
turn (the turn the last ``final`` concludes) and drops what earlier finals
concluded, which is what ``harmonia.training``'s ``guide`` rule trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._enums import Role
from .._errors import InputError
from .._message import Message, RenderConversationConfig
from .._names import ANALYSIS, COT_POLICY_NAMES, FINAL, CotPolicyName

REFERENCE: Final[CotPolicyName] = "reference"
GUIDE: Final[CotPolicyName] = "guide"
KEEP_ALL: Final[CotPolicyName] = "keep_all"
COT_POLICIES: Final = COT_POLICY_NAMES


def resolve_policy(config: RenderConversationConfig | None) -> CotPolicyName:
    """The policy a config asks for (``None`` means the reference default)."""
    if config is None:
        return REFERENCE
    if config.cot_policy is not None:
        if config.cot_policy not in COT_POLICIES:
            raise InputError(
                f"unknown cot_policy {config.cot_policy!r}: choose one of {', '.join(COT_POLICIES)}"
            )
        return config.cot_policy
    return REFERENCE if config.auto_drop_analysis else KEEP_ALL


def dropped_indices(
    messages: Sequence[Message], policy: CotPolicyName, *, training: bool = False
) -> frozenset[int]:
    """Indices of the messages the policy leaves out of the prompt (or training sequence)."""
    if policy == KEEP_ALL:
        return frozenset()
    if policy == REFERENCE:
        return _reference_drops(messages)
    if training:
        return _guide_drops(messages[: _last_turn_start(messages)])
    return _guide_drops(messages)


def _last_turn_start(messages: Sequence[Message]) -> int:
    """Where the last assistant turn starts (tool results belong to the turn)."""
    start = len(messages)
    for i in range(len(messages) - 1, -1, -1):
        role = messages[i].author.role
        if role is Role.ASSISTANT:
            start = i
        elif role is not Role.TOOL:
            break
    return start


def _reference_drops(messages: Sequence[Message]) -> frozenset[int]:
    last_assistant = next((m for m in reversed(messages) if m.author.role is Role.ASSISTANT), None)
    if last_assistant is None or last_assistant.channel != FINAL:
        return frozenset()
    first_final = next((i for i, m in enumerate(messages) if m.channel == FINAL), None)
    if first_final is None:
        return frozenset()
    return frozenset(i for i in range(first_final) if messages[i].channel == ANALYSIS)


def _guide_drops(messages: Sequence[Message]) -> frozenset[int]:
    last_final = max(
        (
            i
            for i, m in enumerate(messages)
            if m.author.role is Role.ASSISTANT and m.channel == FINAL
        ),
        default=-1,
    )
    return frozenset(i for i in range(last_final) if messages[i].channel == ANALYSIS)
