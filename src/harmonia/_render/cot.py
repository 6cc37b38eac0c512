"""Chain-of-thought policies: which earlier ``analysis`` messages a prompt keeps.

This module is the one place that says which reasoning a rendering leaves out:
the renderer, the agent, the server, the OpenAI conversions and the training
samples (``harmonia.training``) all call :func:`dropped_indices`.

* ``"reference"`` -- what ``openai_harmony`` does with ``auto_drop_analysis=True``:
  when the last assistant message is on the ``final`` channel, drop the
  ``analysis`` messages (any role) that come before the *first* ``final``
  message. Later turns' analysis is kept.
* ``"guide"`` -- the harmony guide's rule: drop every ``analysis`` message that a
  later ``final`` assistant message concluded; keep the analysis of the current,
  unfinished turn (e.g. one still calling tools), which the model needs.
* ``"keep_all"`` -- drop nothing (the reference's ``auto_drop_analysis=False``).
* ``"hf"`` -- the gpt-oss Hugging Face chat template's rule: reasoning is kept
  only where no final answer follows it (a tool-calling turn still under way)
  and, in a training sequence, right before a last message that is a final
  answer.

A training sequence (``training=True``) teaches the last turn, reasoning
included: under ``"guide"`` it keeps the analysis of its last assistant turn
and drops what the finals before that turn concluded -- exactly what the
model's prompt held when it wrote that turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._enums import Role
from .._errors import check_choice
from .._message import Message, RenderConversationConfig
from .._names import ANALYSIS, COT_POLICY_NAMES, FINAL, CotPolicyName

REFERENCE: Final[CotPolicyName] = "reference"
GUIDE: Final[CotPolicyName] = "guide"
KEEP_ALL: Final[CotPolicyName] = "keep_all"
HF: Final[CotPolicyName] = "hf"
COT_POLICIES: Final = COT_POLICY_NAMES


def resolve_policy(config: RenderConversationConfig | None) -> CotPolicyName:
    """The policy a config asks for (``None`` means the reference default)."""
    if config is None:
        return REFERENCE
    if config.cot_policy is not None:
        check_policy(config.cot_policy)
        return config.cot_policy
    return REFERENCE if config.auto_drop_analysis else KEEP_ALL


def check_policy(policy: object) -> None:
    """Refuse a name that is not one of :data:`COT_POLICIES`."""
    check_choice(policy, COT_POLICIES, "cot_policy")


def dropped_indices(
    messages: Sequence[Message], policy: CotPolicyName, *, training: bool = False
) -> frozenset[int]:
    """Indices of the messages the policy leaves out of the prompt (or training sequence).

    Plain loops, not generators: training calls this for every sample.
    """
    if policy == KEEP_ALL or not messages:
        return frozenset()
    if policy == REFERENCE:
        return _reference_drops(messages)
    if policy == HF:
        return _hf_drops(messages, training)
    return _guide_drops(messages, last_turn_start(messages) if training else len(messages))


def last_turn_start(messages: Sequence[Message]) -> int:
    """Where the last assistant turn starts (``len`` when there is no assistant message).

    A turn ends at a final answer or where the harness writes something other
    than a tool result (``harmonia.training`` numbers turns the same way), so the
    prompt the harness renders for a turn's first message -- and after each of
    its tool results -- leaves out what the finals before the turn concluded.
    """
    assistant, tool = Role.ASSISTANT, Role.TOOL
    k = len(messages) - 1
    while k >= 0 and messages[k].author.role is not assistant:
        k -= 1
    if k < 0:
        return len(messages)
    start = k
    k -= 1
    while k >= 0:
        m = messages[k]
        role = m.author.role
        if role is assistant:
            if m.channel == FINAL:
                break
            start = k
        elif role is not tool:
            break
        k -= 1
    return start


def _reference_drops(messages: Sequence[Message]) -> frozenset[int]:
    # openai-harmony 0.0.8: when the last assistant message is a final, drop the
    # analysis (any role) before the *first* final.
    assistant = Role.ASSISTANT
    for m in reversed(messages):
        if m.author.role is assistant:
            if m.channel != FINAL:
                return frozenset()
            break
    else:
        return frozenset()
    analysis: list[int] = []
    for i, m in enumerate(messages):
        channel = m.channel
        if channel == FINAL:
            break
        if channel == ANALYSIS:
            analysis.append(i)
    return frozenset(analysis)


def _is_final(m: Message) -> bool:
    return m.author.role is Role.ASSISTANT and m.channel == FINAL


def _guide_drops(messages: Sequence[Message], before: int) -> frozenset[int]:
    """The analysis before the last final answer that precedes index ``before``."""
    last_final = before - 1
    while last_final >= 0 and not _is_final(messages[last_final]):
        last_final -= 1
    return frozenset(k for k in range(last_final) if messages[k].channel == ANALYSIS)


def _hf_drops(messages: Sequence[Message], training: bool) -> frozenset[int]:
    # The template renders reasoning only on tool calls with no final after them,
    # and (training: no generation prompt) on the last message when it is a final.
    keep_run: set[int] = set()
    if training and _is_final(messages[-1]):
        k = len(messages) - 2
        while (
            k >= 0 and messages[k].channel == ANALYSIS and messages[k].author.role is Role.ASSISTANT
        ):
            keep_run.add(k)
            k -= 1
    out = []
    seen_final = False
    for k in range(len(messages) - 1, -1, -1):
        m = messages[k]
        if m.channel == ANALYSIS and seen_final and k not in keep_run:
            out.append(k)
        if _is_final(m):
            seen_final = True
    return frozenset(out)
