"""Turns and faithfulness on a list of messages.

A *turn* is what the model writes between two harness inputs that are not tool
results: it starts at the first assistant message after a system, developer or
user message (or after a final answer) and runs, through tool calls and their
results, to its final answer or the next such message. Only the messages' roles
and channels matter here, never their tokens.

Which reasoning a sequence leaves out is the renderer's rule
(``harmonia._render.cot.dropped_indices``, with ``training=True`` for a sample);
:func:`faithful` checks a sequence against the ``guide`` policy's prompt for
each turn with running counts (``tests/training/test_training_mask_pass.py``
compares it with that policy, prefix by prefix).
"""

from __future__ import annotations

from collections.abc import Sequence

from harmonia import Message, Role
from harmonia.vocabulary import ANALYSIS, FINAL


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
            if m.channel == FINAL:
                in_turn = False  # a final answer ends the turn (as ``last_turn_start``)
        elif role is tool:
            append(turn if in_turn else -1)
        else:
            in_turn = False
            append(-1)
    return out


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
