"""Turns, the reasoning (CoT) rules, and faithfulness, on a list of messages.

A *turn* is what the model writes between two harness inputs that are not tool
results: it starts at the first assistant message after a system, developer or
user message and runs, through tool calls and their results, to the next such
message. Only the messages' roles and channels matter here, never their tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from harmonia import Message, Role
from harmonia.vocabulary import ANALYSIS as ANALYSIS
from harmonia.vocabulary import FINAL

from ._policy import CotRule


def turn_ids(messages: Sequence[Message]) -> list[int]:
    """The turn of every message: -1 for system, developer and user messages."""
    out: list[int] = []
    append = out.append
    assistant, tool = Role.ASSISTANT, Role.TOOL
    turn = -1
    in_turn = False
    for m in messages:
        role = m.author.role
        if role is assistant:
            if not in_turn:
                turn += 1
                in_turn = True
            append(turn)
        elif role is tool:
            append(turn if in_turn else -1)
        else:
            in_turn = False
            append(-1)
    return out


def _is_final(m: Message) -> bool:
    return m.author.role is Role.ASSISTANT and m.channel == FINAL


def inference_drops(messages: Sequence[Message], before: int) -> frozenset[int]:
    """What the model saw at inference for a turn starting at ``before`` (the guide's
    rule): the analysis of earlier turns that a final answer concluded is gone."""
    last_final = before - 1
    while last_final >= 0 and not _is_final(messages[last_final]):
        last_final -= 1
    return frozenset(k for k in range(last_final) if messages[k].channel == ANALYSIS)


def drops(messages: Sequence[Message], rule: CotRule, turns: Sequence[int]) -> frozenset[int]:
    """The messages a training sequence leaves out under ``rule``."""
    if rule == "keep" or not messages:
        return frozenset()
    if rule == "reference":
        # openai-harmony 0.0.8: when the last assistant message is a final, drop the
        # analysis (any role) before the *first* final.
        # Plain loops, not generators: this runs for every sample.
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
    if rule == "guide":
        last_turn = max(turns, default=-1)
        # turn ids never decrease, so the last turn starts at its first index
        start = turns.index(last_turn) if last_turn >= 0 else len(messages)
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
    the message's own turn before it is missing. One pass with running counts.
    """
    # Counts over [0, i): analysis messages, dropped ones, dropped analysis; and the
    # two analysis counts as they stood at the last final answer (0 when none:
    # nothing lies before it).
    out = [True] * len(messages)
    analysis = gone = gone_analysis = 0
    analysis_at_final = gone_analysis_at_final = 0
    turn = -1
    turn_ok = True
    gone_at_turn_start = 0
    assistant = Role.ASSISTANT
    for i, m in enumerate(messages):
        t = turns[i]
        if t >= 0:
            if t != turn:
                turn, gone_at_turn_start = t, gone
                # Dropped before the turn == the analysis before its last final.
                turn_ok = gone_analysis_at_final == analysis_at_final == gone
            # Nothing of the turn itself before this message may be missing.
            out[i] = turn_ok and gone == gone_at_turn_start
        channel = m.channel
        if channel == ANALYSIS:
            analysis += 1
            if i in dropped:
                gone += 1
                gone_analysis += 1
        else:
            if i in dropped:
                gone += 1
            if channel == FINAL and m.author.role is assistant:
                # A final is no analysis: the counts before it are the counts now.
                analysis_at_final, gone_analysis_at_final = analysis, gone_analysis
    return out
