"""One conversation to training samples: ids from the renderer, masks from its spans.

The renderer says which message and part produced every token
(``HarmonyEncoding.render_with_spans``); the mask is that provenance filtered by
the policy. Nothing here re-renders, searches token ids or looks at text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from harmonia import (
    Conversation,
    HarmonyEncoding,
    InputError,
    Message,
    RenderConversationConfig,
    Role,
)

from ._policy import TrainPolicy, resolve_policy
from ._rules import drops, faithful, inference_drops, turn_ids, turn_starts

RETURN: Final = 200002
END: Final = 200007
CALL: Final = 200012
STOPS: Final = frozenset({RETURN, CALL})
IGNORE_INDEX: Final = -100
_KEEP_ALL: Final = RenderConversationConfig(auto_drop_analysis=False)

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


class Span(Protocol):
    """The fields of ``harmonia``'s message spans that masks use."""

    @property
    def message_index(self) -> int | None: ...
    @property
    def start(self) -> int: ...
    @property
    def recipient(self) -> int: ...
    @property
    def message(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def stop(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TrainSample:
    """Token ids, which of them are trained, and why.

    ``loss_mask`` has one byte per token (1: trained). ``spans`` are the
    renderer's, one per rendered message; ``reasons[i]`` says why message ``i``
    of the conversation is or is not trained; ``truncated`` is set when
    ``overflow="truncate"`` cut the sample.
    """

    input_ids: list[int]
    loss_mask: bytes
    spans: tuple[Span, ...]
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
    truncated or refused, as ``overflow`` says.

    >>> from harmonia import load_harmony_encoding
    >>> enc = load_harmony_encoding("HarmonyGptOss")
    >>> conv = [
    ...     Message.from_role_and_content(Role.USER, "2+2?"),
    ...     Message.from_role_and_content(Role.ASSISTANT, "Easy.").with_channel("analysis"),
    ...     Message.from_role_and_content(Role.ASSISTANT, "4").with_channel("final"),
    ... ]
    >>> [sample] = render_for_training(conv, enc)
    >>> enc.decode([t for t, m in zip(sample.input_ids, sample.loss_mask) if m])
    '<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>'
    """
    policy = resolve_policy(policy)
    messages = list(
        conversation.messages if isinstance(conversation, Conversation) else conversation
    )
    if weights is not None and len(weights) != len(messages):
        raise InputError(
            f"got {len(weights)} weights for {len(messages)} messages: give one per message"
        )
    turns = turn_ids(messages)
    drop = drops(messages, policy.cot, turns)
    samples: list[TrainSample] = []
    expanded: set[int] = set()
    if policy.turns == "expand" and not policy.full_sequence:
        starts = turn_starts(turns)
        loyal = faithful(messages, drop, turns)
        for t, start in sorted(starts.items()):
            members = [i for i, tt in enumerate(turns) if tt == t]
            if all(loyal[i] or i in drop for i in members):
                continue
            end = members[-1] + 1
            sub_drop = inference_drops(messages, start)
            only = frozenset(members)
            sample = _one(
                encoding,
                messages[:end],
                sub_drop,
                turns[:end],
                policy,
                weights,
                only,
                len(samples) + 1,
            )
            if sample is not None and 1 in sample.loss_mask:
                samples.append(sample)
                expanded.update(i for i in members if sample.reasons[i] == TRAINED)
    full = _one(encoding, messages, drop, turns, policy, weights, None, 0, expanded)
    if full is not None:
        samples.insert(0, full)
    # Sample 0 is the full conversation; expanded turns follow in order.
    return [s if s.sample_index == i else _renumber(s, i) for i, s in enumerate(samples)]


def _renumber(sample: TrainSample, index: int) -> TrainSample:
    return TrainSample(
        sample.input_ids, sample.loss_mask, sample.spans, sample.reasons, index, sample.truncated
    )


def _one(
    encoding: HarmonyEncoding,
    messages: Sequence[Message],
    drop: frozenset[int],
    turns: Sequence[int],
    policy: TrainPolicy,
    weights: Sequence[float | None] | None,
    only: frozenset[int] | None,
    index: int,
    expanded: set[int] | frozenset[int] = frozenset(),
) -> TrainSample | None:
    conversation = Conversation(list(messages))
    rendered = encoding.render_with_spans(conversation, _KEEP_ALL, mode="conversation", drop=drop)
    ids = rendered.ids
    spans = rendered.spans
    last = messages[-1] if messages else None
    # The reference ends a conversation's last final answer with <|return|>.
    if (
        last is not None
        and last.author.role is Role.ASSISTANT
        and last.channel == "final"
        and spans
        and spans[-1].message_index == len(messages) - 1
    ):
        ids[-1] = RETURN if policy.final_end == "return" else END
    n = len(ids)
    if policy.full_sequence:
        mask = bytearray(b"\x01") * n
        reasons = tuple(DROPPED if i in drop else FULL for i in range(len(messages)))
    else:
        mask = bytearray(n)
        reasons = _mask(messages, spans, ids, drop, turns, policy, weights, only, expanded, mask)
    truncated = False
    if policy.max_length is not None and n > policy.max_length:
        if policy.overflow == "error":
            raise InputError(
                f"a sample of {n} tokens is longer than max_length={policy.max_length}: "
                "raise max_length or choose overflow='drop' or 'truncate'"
            )
        if policy.overflow == "drop":
            return None
        del ids[policy.max_length :]
        del mask[policy.max_length :]
        truncated = True
    return TrainSample(ids, bytes(mask), spans, reasons, index, truncated)


def _mask(
    messages: Sequence[Message],
    spans: Sequence[Span],
    ids: Sequence[int],
    drop: frozenset[int],
    turns: Sequence[int],
    policy: TrainPolicy,
    weights: Sequence[float | None] | None,
    only: frozenset[int] | None,
    expanded: set[int] | frozenset[int],
    mask: bytearray,
) -> tuple[str, ...]:
    reasons = [DROPPED if i in drop else NOT_ASSISTANT for i in range(len(messages))]
    loyal = (
        faithful(messages, drop, turns)
        if policy.turns == "faithful" or policy.turns == "expand"
        else None
    )
    last_turn = max(turns, default=-1)
    chosen: list[int] = []  # positions in spans of the messages to train
    for k, span in enumerate(spans):
        i = span.message_index
        assert i is not None  # a conversation render has no trailing header
        m = messages[i]
        if m.author.role is not Role.ASSISTANT:
            continue
        if only is not None and i not in only:
            reasons[i] = OTHER_TURN
        elif i in expanded:
            reasons[i] = EXPANDED
        elif m.channel not in policy.channels:
            reasons[i] = CHANNEL_OFF
        elif not policy.tool_calls and _has_recipient(m):
            reasons[i] = CALL_OFF
        elif policy.weights and weights is not None and weights[i] is not None and not weights[i]:
            reasons[i] = WEIGHT_ZERO
        elif policy.turns == "last" and turns[i] != last_turn:
            reasons[i] = NOT_LAST
        elif loyal is not None and not loyal[i]:
            reasons[i] = UNFAITHFUL
        else:
            reasons[i] = TRAINED
            chosen.append(k)
    # A turn's messages after its last stop are never followed by one: leave them out.
    if chosen:
        last_stop = max((k for k in chosen if _ends_turn(spans, k, messages)), default=-1)
        for k in chosen[chosen.index(last_stop) + 1 if last_stop >= 0 else 0 :]:
            reasons[spans[k].message_index] = NO_STOP  # type: ignore[index]
        chosen = [k for k in chosen if k <= last_stop]
    last_index = len(messages) - 1
    for k in chosen:
        span = spans[k]
        prev = spans[k - 1] if k else None
        inner = (
            prev is not None
            and messages[prev.message_index].author.role is Role.ASSISTANT  # type: ignore[index]
            and ids[prev.end] == END
        )
        if policy.inner_start if inner else policy.turn_start:
            mask[span.start : span.recipient] = b"\x01" * (span.recipient - span.start)
        body = span.message + 1
        if policy.headers:
            mask[span.recipient : body] = b"\x01" * (body - span.recipient)
        # An earlier final is closed with <|end|> in the history, a token the model
        # never writes after a final (it writes <|return|>).
        closes = policy.terminators and (
            policy.end_after_final
            or span.message_index == last_index
            or messages[span.message_index].channel != "final"  # type: ignore[index]
        )
        end = span.stop if closes else span.end
        mask[body:end] = b"\x01" * (end - body)
    return tuple(reasons)


def _ends_turn(spans: Sequence[Span], k: int, messages: Sequence[Message]) -> bool:
    """A final answer or a tool call: what the model stops after."""
    m = messages[spans[k].message_index]  # type: ignore[index]
    return m.channel == "final" or _has_recipient(m)


def _has_recipient(m: Message) -> bool:
    return m.recipient is not None and m.recipient != "all"


def trained_text(encoding: HarmonyEncoding, sample: TrainSample) -> Iterator[tuple[bool, str]]:
    """The sample's text in runs of ``(trained, text)``."""
    run: list[int] = []
    state = None
    for t, m in zip(sample.input_ids, sample.loss_mask, strict=True):
        if state is not None and bool(m) != state:
            yield state, encoding.decode(run)
            run = []
        state = bool(m)
        run.append(t)
    if state is not None:
        yield state, encoding.decode(run)
