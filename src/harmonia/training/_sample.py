"""One conversation to training samples: ids from the renderer, masks from its spans.

The renderer says which message and part produced every token
(``HarmonyEncoding.render_with_spans``); the mask is that provenance filtered by
the policy. Nothing here re-renders, searches token ids or looks at text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from harmonia import (
    Conversation,
    HarmonyEncoding,
    InputError,
    Message,
    MessageSpans,
    RenderConversationConfig,
    Role,
    SpanRecord,
)
from harmonia._render.cot import GUIDE, dropped_indices
from harmonia._turn import is_call
from harmonia.vocabulary import ANALYSIS, END_ID, FINAL, RETURN_ID

from ._faithful import faithful, turn_ids
from ._policy import TrainPolicy, resolve_policy
from ._problems import RowError

IGNORE_INDEX: Final = -100
_KEEP_ALL: Final = RenderConversationConfig(auto_drop_analysis=False)
_new_sample: Final = tuple.__new__
#: One weight per message (``None``: no weight), or no weights at all.
Weights = Sequence[float | None] | None

# Why a message is, or is not, trained (``TrainSample.reasons``).
TRAINED: Final = "trained"
NOT_ASSISTANT: Final = "context: not written by the assistant"
DROPPED: Final = "left out of the sequence by the reasoning rule"
CHANNEL_OFF: Final = "context: its channel is not trained by the policy"
CALL_OFF: Final = "context: tool calls are not trained by the policy"
WEIGHT_ZERO: Final = "context: weight 0"
NOT_LAST: Final = "context: not the last turn"
UNFAITHFUL: Final = "context: the sequence lacks reasoning the model saw when writing it"
NO_STOP: Final = "context: no final answer or tool call follows it"
EXPANDED: Final = "context here: trained in its own sample (turns='expand')"
OTHER_TURN: Final = "context: this sample trains another turn"
FULL: Final = "trained: full-sequence loss"
TRAILING: Final = "left out: after the last final answer, nothing trained follows it"
TRIMMED: Final = "left out to fit max_length (overflow='trim-history')"
_KEPT_ROLES: Final = frozenset({Role.SYSTEM, Role.DEVELOPER})
_IN_TURN: Final = frozenset({Role.ASSISTANT, Role.TOOL})


class TrainSample(NamedTuple):
    """Token ids, which of them are trained, and why.

    ``loss_mask`` has one byte per token (1: trained). ``spans`` are the
    renderer's, one per rendered message; ``reasons[i]`` says why message ``i``
    of the conversation is or is not trained; ``truncated`` is set when
    ``overflow`` (``"truncate"`` or ``"trim-history"``) cut the sample.
    """

    input_ids: list[int]
    loss_mask: bytes
    spans: MessageSpans
    reasons: tuple[str, ...]
    sample_index: int = 0
    truncated: bool = False

    @property
    def n_trained(self) -> int:
        return self.loss_mask.count(1)

    def labels(self) -> list[int]:
        """The ids where trained, -100 elsewhere (the Hugging Face convention)."""
        return [
            t if m else IGNORE_INDEX for t, m in zip(self.input_ids, self.loss_mask, strict=True)
        ]


def render_for_training(
    conversation: Conversation | Sequence[Message],
    encoding: HarmonyEncoding,
    policy: TrainPolicy | str | None = None,
    *,
    weights: Sequence[float | None] | None = None,
) -> list[TrainSample]:
    """The training samples of one conversation under ``policy`` (a preset's name works).

    ``weights`` gives one weight per message (``None``: no weight); a message of
    weight 0 is never trained. Most policies give one sample; ``turns="expand"``
    gives one more per turn whose reasoning the full sequence leaves out. A sample
    longer than ``max_length`` is dropped (an empty list when it was the only one),
    truncated or refused, as ``overflow`` says (docs/training.md has a worked example).
    """
    policy = resolve_policy(policy)
    if not isinstance(conversation, Conversation):
        conversation = Conversation.from_messages(conversation)  # checks the items
    messages = conversation.messages
    if weights is not None and len(weights) != len(messages):
        raise InputError(
            f"got {len(weights)} weights for {len(messages)} messages: give one per message"
        )
    tail = _trailing_context(messages, policy)
    if tail:
        conversation = Conversation(messages[:-tail])
        weights = None if weights is None else weights[:-tail]
    if policy.overflow == "trim-history" and policy.max_length is not None:
        samples = _trim_history(conversation, encoding, policy, weights)
    else:
        samples = _samples(conversation, encoding, policy, weights)
    if tail:
        samples = [s._replace(reasons=s.reasons + (TRAILING,) * tail) for s in samples]
    return samples


def _trailing_context(messages: Sequence[Message], policy: TrainPolicy) -> int:
    """How many messages after the conversation's last assistant message, a final
    answer, the samples leave out: nothing the model wrote follows them, and
    rendered they would close that final with the history's ``<|end|>`` (which the
    model never writes) instead of its ``<|return|>``, leaving it without a trained
    stop. Kept with full-sequence loss (every token is trained there) and with the
    reference rule (which reproduces openai-harmony's render)."""
    if policy.full_sequence or policy.cot == "reference":
        return 0
    n = len(messages)
    for k in range(n - 1, -1, -1):
        m = messages[k]
        if m.author.role is Role.ASSISTANT:
            final = m.channel == FINAL and not is_call(m)
            return n - 1 - k if final else 0
    return 0


def _samples(
    conversation: Conversation, encoding: HarmonyEncoding, policy: TrainPolicy, weights: Weights
) -> list[TrainSample]:
    messages = conversation.messages
    # Turns matter to every turns mode but "all".
    turns: Sequence[int] = turn_ids(messages) if policy.turns != "all" else ()
    drop = dropped_indices(messages, policy.cot, training=True)
    if policy.turns != "expand" or policy.full_sequence:  # one sample, the common case
        full = _one(encoding, conversation, drop, turns, policy, weights, None, 0)
        return [] if full is None else [full]
    samples: list[TrainSample] = []
    expanded: set[int] = set()
    for members, sub_drop in _expansions(messages, drop, turns):
        end = members[-1] + 1
        prefix, only = Conversation(messages[:end]), frozenset(members)
        sample = _one(
            encoding, prefix, sub_drop, turns[:end], policy, weights, only, len(samples) + 1
        )
        if sample is not None and 1 in sample.loss_mask:
            samples.append(sample)
            expanded.update(i for i in members if sample.reasons[i] == TRAINED)
    full = _one(encoding, conversation, drop, turns, policy, weights, None, 0, expanded)
    if full is not None:
        samples.insert(0, full)
    # Sample 0 is the full conversation; expanded turns follow in order.
    return [s if s.sample_index == i else s._replace(sample_index=i) for i, s in enumerate(samples)]


def _expansions(
    messages: Sequence[Message], drop: frozenset[int], turns: Sequence[int]
) -> list[tuple[list[int], frozenset[int]]]:
    """The extra samples of ``turns="expand"``: (messages to train, messages to leave out).

    One per turn the full sequence cannot train faithfully, its history rendered
    as at inference. Consecutive such turns without reasoning share one sample
    when each stays faithful in it (their history then differs only by turns the
    sample shows in full), which saves rendering that history again.
    """
    loyal = faithful(messages, drop, turns)
    members: dict[int, list[int]] = {}
    for i, t in enumerate(turns):
        if t >= 0:
            members.setdefault(t, []).append(i)
    out: list[tuple[list[int], frozenset[int]]] = []
    previous = -2  # the turn that the last sample ends with
    merge_ok = False  # the last sample's turns have no reasoning
    for t, group in sorted(members.items()):
        if all(loyal[i] or i in drop for i in group):
            continue
        plain = not any(messages[i].channel == ANALYSIS for i in group)
        if out and merge_ok and plain and previous == t - 1:
            trained, sub_drop = out[-1]
            end = group[-1] + 1
            fits = faithful(messages[:end], sub_drop, turns[:end])
            if all(fits[i] for i in group):
                out[-1] = ([*trained, *group], sub_drop)
                previous = t
                continue
        # Left out as in the model's prompt for the turn: the guide policy, the
        # agent's and the server's default.
        out.append((list(group), dropped_indices(messages[: group[0]], GUIDE)))
        previous, merge_ok = t, plain
    return out


def _trim_history(
    conversation: Conversation, encoding: HarmonyEncoding, policy: TrainPolicy, weights: Weights
) -> list[TrainSample]:
    """``overflow="trim-history"``: leave out whole earliest exchanges until every
    sample fits, keeping the system and developer messages.

    An exchange runs from a user message (or whatever else the harness wrote) to
    the next one, the assistant's turn and its tool results with it, so a sample
    never starts inside a turn. Reasons and spans keep the original indices; a
    left-out message's reason is :data:`TRIMMED`.
    """
    limit = policy.max_length
    assert limit is not None
    unlimited = policy.with_(max_length=None, overflow="drop")
    messages = conversation.messages
    head = [i for i, m in enumerate(messages) if m.author.role in _KEPT_ROLES]
    rest = [i for i, m in enumerate(messages) if m.author.role not in _KEPT_ROLES]
    # Where each exchange begins, as positions in ``rest``.
    cuts = [k for k, i in enumerate(rest) if k and messages[i].author.role not in _IN_TURN]
    for cut in (0, *cuts):
        keep = sorted((*head, *rest[cut:]))
        part, part_weights = conversation, weights
        if cut:
            part = Conversation([messages[i] for i in keep])
            part_weights = None if weights is None else [weights[i] for i in keep]
        samples = _samples(part, encoding, unlimited, part_weights)
        if not samples:
            break  # nothing left to train: trimming further only removes more
        if all(len(s.input_ids) <= limit for s in samples):
            return samples if not cut else [_widen(s, keep, len(messages)) for s in samples]
    raise RowError(
        "E141",
        f"longer than max_length={limit} even with only the last exchange and the "
        "system and developer messages: raise max_length or choose overflow='truncate'",
    )


def _widen(sample: TrainSample, keep: Sequence[int], n: int) -> TrainSample:
    """A sample of the messages ``keep`` with reasons and spans for all ``n``."""
    reasons = [TRIMMED] * n
    for k, i in enumerate(keep):
        reasons[i] = sample.reasons[k]
    spans = MessageSpans(
        [
            (i if i is None else keep[i], start, offsets, stop)
            for i, start, offsets, stop in sample.spans.records
        ]
    )
    return sample._replace(spans=spans, reasons=tuple(reasons), truncated=True)


def _one(
    encoding: HarmonyEncoding,
    conversation: Conversation,
    drop: frozenset[int],
    turns: Sequence[int],
    policy: TrainPolicy,
    weights: Weights,
    only: frozenset[int] | None,
    index: int,
    expanded: set[int] | frozenset[int] = frozenset(),
) -> TrainSample | None:
    messages = conversation.messages
    ids, spans, _, _ = encoding.render_with_spans(
        conversation, _KEEP_ALL, mode="conversation", drop=drop
    )
    records = spans.records
    # The reference ends a conversation's last final answer with <|return|>.
    if records and records[-1][0] == len(messages) - 1:
        last = messages[-1]
        if last.author.role is Role.ASSISTANT and last.channel == FINAL:
            ids[-1] = RETURN_ID if policy.final_end == "return" else END_ID
    if policy.full_sequence:
        mask = b"\x01" * len(ids)
        reasons = tuple(DROPPED if i in drop else FULL for i in range(len(messages)))
    else:
        mask, reasons = mask_from_spans(
            messages, records, ids, drop, turns, policy, weights, only, expanded
        )
    return finish_sample(ids, mask, spans, reasons, policy, index)


def finish_sample(
    ids: list[int],
    mask: bytes,
    spans: MessageSpans,
    reasons: tuple[str, ...],
    policy: TrainPolicy,
    index: int,
) -> TrainSample | None:
    """Apply ``max_length``: the sample, ``None`` (dropped), or an error."""
    n = len(ids)
    truncated = False
    if policy.max_length is not None and n > policy.max_length:
        if policy.overflow == "error":
            raise InputError(
                f"a sample of {n} tokens is longer than max_length={policy.max_length}: "
                "raise max_length or choose overflow='drop', 'truncate' or 'trim-history'"
            )
        if policy.overflow == "drop":
            return None
        if policy.overflow == "trim-history":
            raise InputError(
                "overflow='trim-history' needs harmonia's own rendering (the hf dialect "
                "renders the template's text as one piece): choose 'drop' or 'truncate'"
            )
        del ids[policy.max_length :]
        mask = mask[: policy.max_length]
        truncated = True
    # tuple.__new__ skips the keyword handling of a NamedTuple's __new__ (hot path).
    return _new_sample(TrainSample, (ids, mask, spans, reasons, index, truncated))


def mask_from_spans(
    messages: Sequence[Message],
    spans: Sequence[SpanRecord],
    ids: Sequence[int],
    drop: frozenset[int],
    turns: Sequence[int],
    policy: TrainPolicy,
    weights: Weights,
    only: frozenset[int] | None,
    expanded: set[int] | frozenset[int],
) -> tuple[bytes, tuple[str, ...]]:
    """The loss mask (one byte per id, 1: trained), and why each message is or is not
    trained."""
    reasons = [NOT_ASSISTANT] * len(messages)
    for gone in drop:
        reasons[gone] = DROPPED
    # What rules a message out before (``first``) and after (``then``) its channel
    # and call are looked at; ``None`` when nothing does, the common case.
    first = _ruled_out_first(len(messages), only, expanded)
    then = _ruled_out_then(messages, drop, turns, policy, weights)
    calls_off = not policy.tool_calls
    gated = first is not None or calls_off or then is not None
    channels = policy.channels
    headers, inner_start, turn_start = policy.headers, policy.inner_start, policy.turn_start
    terminators, end_after_final = policy.terminators, policy.end_after_final
    last_index = len(messages) - 1
    assistant = Role.ASSISTANT
    # One pass over the spans, with plain locals: this runs for every message of
    # every sample. Trained ranges go to ``runs`` as flat (begin, end) pairs, a range
    # that starts where the previous ends extending it (a message's range often
    # ends where the next begins); ``kept`` is the state after the last final or
    # call, since the messages after it are never followed by a stop.
    runs: list[int] = [0, 0]
    kept_runs, kept_end, kept_after = 2, 0, -1
    inner = False  # the previous span is an assistant message closed with <|end|>
    i: int  # a conversation render has no None index
    # A record's offsets: (recipient, channel, content_type, message) from its start.
    for i, start, offsets, stop in spans:  # type: ignore[assignment]
        m = messages[i]
        if m.author.role is not assistant:
            inner = False
            continue
        after_end = inner
        inner = ids[stop - 1] == END_ID
        channel = m.channel
        # The reasons in order of precedence: first, channel, call, then.
        if channel not in channels:
            why = None if first is None else first[i]
            reasons[i] = CHANNEL_OFF if why is None else why
            continue
        # The one call rule (``_turn.classify``): ``to=user`` or a content-type word
        # in the recipient's place is no call.
        call = is_call(m)
        if gated:
            why = None if first is None else first[i]
            if why is None and calls_off and call:
                why = CALL_OFF
            if why is None and then is not None:
                why = then[i]
            if why is not None:
                reasons[i] = why
                continue
        reasons[i] = TRAINED
        # The model writes <|start|>assistant itself only after its own <|end|>.
        trains_start = inner_start if after_end else turn_start
        # An earlier final is closed with <|end|> in the history, a token the model
        # never writes after a final (it writes <|return|>).
        closes = terminators and (end_after_final or i == last_index or channel != FINAL)
        stop_at = stop if closes else stop - 1
        if headers:  # one range: [start or recipient, stop_at)
            begin = start if trains_start else start + offsets[0]
        else:
            if trains_start:
                if runs[-1] == start:
                    runs[-1] = start + offsets[0]
                else:
                    runs += (start, start + offsets[0])
            begin = start + offsets[3] + 1  # the body, after <|message|>
        if runs[-1] == begin:
            runs[-1] = stop_at
        else:
            runs += (begin, stop_at)
        if call or channel == FINAL:
            kept_runs, kept_end, kept_after = len(runs), stop_at, i
    for i in range(kept_after + 1, len(reasons)):
        if reasons[i] == TRAINED:
            reasons[i] = NO_STOP
    del runs[kept_runs:]
    runs[-1] = kept_end
    # The mask in one join of runs of zeros and ones: cheaper than writing slices of
    # a bytearray (about twice, for the few runs a sample has).
    parts: list[bytes] = []
    append = parts.append
    zero, one = b"\x00", b"\x01"
    done = 0
    pairs = iter(runs)
    for begin, end in zip(pairs, pairs, strict=True):
        append(zero * (begin - done))
        append(one * (end - begin))
        done = end
    append(zero * (len(ids) - done))
    return b"".join(parts), tuple(reasons)


def _ruled_out_first(
    n: int, only: frozenset[int] | None, expanded: set[int] | frozenset[int]
) -> list[str | None] | None:
    """Per message, why ``only`` or ``expanded`` leaves it untrained (or ``None``)."""
    if only is None and not expanded:
        return None
    return [
        OTHER_TURN if only is not None and i not in only else EXPANDED if i in expanded else None
        for i in range(n)
    ]


def _ruled_out_then(
    messages: Sequence[Message],
    drop: frozenset[int],
    turns: Sequence[int],
    policy: TrainPolicy,
    weights: Weights,
) -> list[str | None] | None:
    """Per message, why weights, the turn or faithfulness leave it untrained (or
    ``None``), in that order of precedence."""
    weighted = weights if policy.weights else None
    last_turn = max(turns, default=-1) if policy.turns == "last" else None
    loyal = faithful(messages, drop, turns) if policy.turns in ("faithful", "expand") else None
    if weighted is None and last_turn is None and loyal is None:
        return None
    out: list[str | None] = (
        [None] * len(messages) if loyal is None else [None if ok else UNFAITHFUL for ok in loyal]
    )
    if last_turn is not None:
        for i, t in enumerate(turns):
            if t != last_turn:
                out[i] = NOT_LAST
    if weighted is not None:
        for i in range(len(messages)):  # an expanded turn's prefix has fewer messages
            w = weighted[i]
            if w is not None and not w:
                out[i] = WEIGHT_ZERO
    return out
