"""Turns, the reasoning (CoT) rules, and faithfulness, on a list of messages.

A *turn* is what the model writes between two harness inputs that are not tool
results: it starts at the first assistant message after a system, developer or
user message and runs, through tool calls and their results, to the next such
message. Only the messages' roles and channels matter here, never their tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from harmonia import Message, Role

from ._policy import CotRule

ANALYSIS = "analysis"
FINAL = "final"


def turn_ids(messages: Sequence[Message]) -> list[int]:
    """The turn of every message: -1 for system, developer and user messages."""
    out: list[int] = []
    turn = -1
    in_turn = False
    for m in messages:
        role = m.author.role
        if role is Role.ASSISTANT or role is Role.TOOL:
            if not in_turn and role is Role.ASSISTANT:
                turn += 1
                in_turn = True
            out.append(turn if in_turn else -1)
        else:
            in_turn = False
            out.append(-1)
    return out


def turn_starts(turns: Sequence[int]) -> dict[int, int]:
    """The index of the first message of each turn."""
    starts: dict[int, int] = {}
    for i, t in enumerate(turns):
        if t >= 0 and t not in starts:
            starts[t] = i
    return starts


def _is_final(m: Message) -> bool:
    return m.author.role is Role.ASSISTANT and m.channel == FINAL


def inference_drops(messages: Sequence[Message], before: int) -> frozenset[int]:
    """What the model saw at inference for a turn starting at ``before`` (the guide's
    rule): the analysis of earlier turns that a final answer concluded is gone."""
    last_final = max((j for j in range(before) if _is_final(messages[j])), default=-1)
    return frozenset(k for k in range(last_final) if messages[k].channel == ANALYSIS)


def drops(messages: Sequence[Message], rule: CotRule, turns: Sequence[int]) -> frozenset[int]:
    """The messages a training sequence leaves out under ``rule``."""
    if rule == "keep" or not messages:
        return frozenset()
    if rule == "reference":
        # openai-harmony 0.0.8: when the last assistant message is a final, drop the
        # analysis (any role) before the *first* final.
        last = next((m for m in reversed(messages) if m.author.role is Role.ASSISTANT), None)
        if last is None or last.channel != FINAL:
            return frozenset()
        first = next((i for i, m in enumerate(messages) if m.channel == FINAL), len(messages))
        return frozenset(i for i in range(first) if messages[i].channel == ANALYSIS)
    if rule == "guide":
        last_turn = max(turns, default=-1)
        start = turn_starts(turns).get(last_turn, len(messages))
        return inference_drops(messages, start)
    # The HF template renders reasoning only on tool calls with no final after them,
    # and on the last message when it is a final answer.
    keep_run: set[int] = set()
    if _is_final(messages[-1]):
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


def faithful(
    messages: Sequence[Message], dropped: frozenset[int], turns: Sequence[int]
) -> list[bool]:
    """For every message: is the sequence before it what the model saw when writing it?

    True when the earlier turns' reasoning is dropped exactly as at inference (the
    analysis before the last final answer that precedes the turn) and nothing of
    the message's own turn before it is missing. One pass with prefix counts.
    """
    n = len(messages)
    # Prefix counts over [0, x): analysis messages, dropped ones, dropped analysis.
    analysis = [0] * (n + 1)
    gone = [0] * (n + 1)
    gone_analysis = [0] * (n + 1)
    for k, m in enumerate(messages):
        a = m.channel == ANALYSIS
        d = k in dropped
        analysis[k + 1] = analysis[k] + a
        gone[k + 1] = gone[k] + d
        gone_analysis[k + 1] = gone_analysis[k] + (a and d)
    out = [True] * n
    last_final = 0  # the last final answer so far (0 when none: nothing lies before it)
    turn = -1
    turn_ok = True
    turn_start = 0
    for i, t in enumerate(turns):
        if t >= 0:
            if t != turn:
                turn, turn_start = t, i
                # Dropped before the turn == the analysis before its last final.
                expected = analysis[last_final]
                turn_ok = gone_analysis[last_final] == expected == gone[i]
            # Nothing of the turn itself before this message may be missing.
            out[i] = turn_ok and gone[i] == gone[turn_start]
        if _is_final(messages[i]):
            last_final = i
    return out
