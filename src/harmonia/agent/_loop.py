"""The agent loop's state machine: given what happened, what to do next. No I/O.

Theory of operation
-------------------

An agent run alternates between the model and the tools until the model
answers. :class:`AgentLoop` holds that alternation as a state machine in the
style of h11 and of harmonia's parser: it never calls an engine, a tool or a
clock. A driver (``harmonia.agent.Agent``, or your own) feeds it *inputs*,
and each :meth:`AgentLoop.send` returns a :class:`Step`: the UI *events* to
show now, and the *action* the driver must take next.

States and inputs (the table ``_TRANSITIONS`` is the only place the state
changes)::

    IDLE      --Start------------------> SAMPLING   action Sample(prompt, params, constraint)
    SAMPLING  --TokensSampled----------> SAMPLING   events; action None (keep feeding)
    SAMPLING  --ItemsSampled-----------> SAMPLING   the same, the ids read by the caller
    SAMPLING  --GenerationFinished-----> TOOLS      <|call|> ended it: action RunTool(call)
                                      -> DONE       <|return|> (answer), a limit, an error
    TOOLS     --ToolResult(reply)------> SAMPLING   the reply is appended; next Sample
                                      -> DONE       reply None: the caller answers the call;
                                                    or the step limit
    SAMPLING/TOOLS --Cancel(reason)----> DONE       cancellation, wall time
    DONE: every input is refused

Entering DONE produces the :class:`Done` event and the :class:`Finished`
action, both carrying the :class:`AgentResult`. An input that makes no sense
in the current state (tokens while a tool runs) is the driver's bug and
raises :class:`harmonia.InputError`.

What the loop does at each step:

* **Renders** the conversation for the next assistant turn with ``cot_policy``
  (the guide's rule by default; docs/agent.md, "Reasoning in the prompt, and the
  history", says what each turn keeps and why a sampled ``<|return|>`` is kept
  as ``<|end|>``).
* **Parses** the sampled ids with a strict :class:`harmonia.StreamableParser`
  and reads each header with the turn layer's ``classify``, as API streams and
  ``is_tool_call`` do: reasoning, a preamble, the answer or a tool call. A caller
  that streams the ids through an ``OutputAssembler`` sends its events instead
  (``ItemsSampled``): read once, what runs is what was shown. Finished messages
  join the conversation as they end, so a cancellation keeps what was complete.
* **Budgets**: each generation's ``max_tokens`` is lowered to the tokens the
  run has left; the step limit is checked before each generation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, cast

import harmonia
from harmonia import (
    Author,
    ContentDelta,
    Conversation,
    HarmonyEncoding,
    HarmonyError,
    InputError,
    Message,
    MessageDone,
    MessageStarted,
    ModelOutputError,
    RenderConversationConfig,
    Role,
    StreamableParser,
    TextContent,
)
from harmonia._render.cot import check_policy
from harmonia._turn import OutputEvent, OutputItem, Reading, classify
from harmonia.engines import Constraint, Finish, FinishReason, SamplingParams, Usage
from harmonia.vocabulary import COMMENTARY
from harmonia.vocabulary import DEFAULT_COT_POLICY as DEFAULT_COT_POLICY

from ._events import (
    AgentEvent,
    AgentResult,
    Done,
    FinalDelta,
    MessageCompleted,
    PreambleDelta,
    ReasoningDelta,
    StopReason,
    ToolCallStarted,
    ToolResultReceived,
)
from ._limits import AgentLimits

ConstraintFactory = Callable[[Conversation], "Constraint | None"]


class State(enum.Enum):
    """Where a run is."""

    IDLE = "idle"
    SAMPLING = "sampling"
    TOOLS = "tools"
    DONE = "done"

    # Looked up with the input's type once per input (``_TRANSITIONS``): the identity
    # hash is C code, Enum's own ``__hash__`` a Python call per streamed token.
    __hash__ = object.__hash__


# -- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Begin the run."""


@dataclass(frozen=True, slots=True)
class TokensSampled:
    """Ids the engine produced since the last input."""

    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ItemsSampled:
    """``count`` ids the engine produced, read by the caller's ``OutputAssembler``."""

    count: int
    events: tuple[OutputEvent, ...]


@dataclass(frozen=True, slots=True)
class GenerationFinished:
    """The generation ended; ``error`` is the engine's failure with ``FinishReason.ERROR``."""

    finish: Finish
    error: HarmonyError | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The reply to the pending call, or ``None`` when the caller must answer it."""

    reply: Message | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop now: the caller cancelled (``CANCELLED``) or time ran out (``MAX_SECONDS``)."""

    reason: StopReason = StopReason.CANCELLED


Input = Start | TokensSampled | ItemsSampled | GenerationFinished | ToolResult | Cancel

# -- actions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """Start a generation: ``engine.generate(prompt, params, constraint=constraint)``."""

    prompt: tuple[int, ...]
    params: SamplingParams
    constraint: Constraint | None


@dataclass(frozen=True, slots=True)
class RunTool:
    """Run the tool call ``call`` and send back its reply (``ToolResult``)."""

    call: Message


@dataclass(frozen=True, slots=True)
class Finished:
    """The run is over; stop any generation still running."""

    result: AgentResult


Action = Sample | RunTool | Finished


@dataclass(frozen=True, slots=True)
class Step:
    """What one input produced: events to show, then the action to take (``None``: wait)."""

    events: tuple[AgentEvent, ...]
    action: Action | None


_DeltaKind = type[ReasoningDelta] | type[PreambleDelta] | type[FinalDelta]
_Handler = Callable[["AgentLoop", object], State]


class AgentLoop:
    """The sans-IO agent loop (see the module docstring for the states, and docs/agent.md,
    "The state machine underneath", for a run step by step)."""

    def __init__(
        self,
        encoding: HarmonyEncoding,
        conversation: Conversation,
        *,
        params: SamplingParams | None = None,
        limits: AgentLimits | None = None,
        constraint: ConstraintFactory | None = None,
        cot_policy: str = DEFAULT_COT_POLICY,
        prompt: Sequence[int] | None = None,
        deltas: bool = True,
    ) -> None:
        self._enc = encoding
        # False: no text delta events, for a caller that follows the text elsewhere (a
        # server's run; one object per streamed token that nothing read).
        self._deltas = deltas
        # The caller's own ids for the first step (a server's, spliced onto the ids an earlier
        # response sampled, so the engine's prefix cache holds): rendering again would differ.
        self._first_prompt = None if prompt is None else tuple(prompt)
        self._history = list(conversation.messages)  # the caller's list is never touched
        self._new: list[Message] = []
        self._params = params or SamplingParams()
        self._limits = limits or AgentLimits()
        self._constraint = constraint
        check_policy(cot_policy)  # refused now rather than at the first render
        self._config = RenderConversationConfig(cot_policy=cast(Any, cot_policy))
        # <|call|> ends a step that calls a tool; <|return|> (the other one) ends the turn.
        self._call_id = max(encoding.stop_tokens_for_assistant_actions())
        self._state = State.IDLE
        self._events: list[AgentEvent] = []
        self._action: Action | None = None
        # Per run.
        self._steps = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._result: AgentResult | None = None
        # Per step.
        self._parser: StreamableParser | None = None
        self._header_kind: _DeltaKind | None = None
        self._calls = False  # the current message is a tool call
        self._item: OutputItem | None = None  # the item being read (ItemsSampled)
        self._pending: Message | None = None  # the call RunTool asked for

    # -- the public face -------------------------------------------------------------

    @property
    def state(self) -> State:
        """The current state."""
        return self._state

    @property
    def conversation(self) -> Conversation:
        """The conversation so far: the caller's messages, then the finished new ones."""
        return Conversation.from_messages([*self._history, *self._new])

    @property
    def limits(self) -> AgentLimits:
        """The limits this run obeys (a driver enforces ``max_seconds`` with ``Cancel``)."""
        return self._limits

    @property
    def result(self) -> AgentResult | None:
        """The result once the run is ``DONE``."""
        return self._result

    def send(self, event: Input) -> Step:
        """Feed one input; returns the events it produced and the next action."""
        handler = _TRANSITIONS.get((self._state, type(event)))
        if handler is None:
            raise InputError(
                f"AgentLoop: {type(event).__name__} cannot be sent in state "
                f"{self._state.value!r}; {_EXPECTED[self._state]}"
            )
        self._events = []
        self._action = None
        # The one place the state changes.
        self._state = handler(self, event)
        return Step(tuple(self._events), self._action)

    # -- transitions -----------------------------------------------------------------

    def _on_start(self, _: object) -> State:
        return self._next_sample()

    def _on_tokens(self, event: object) -> State:
        assert isinstance(event, TokensSampled) and self._parser is not None
        for token in event.tokens:
            self._completion_tokens += 1
            try:  # the parser, or the reading of a header, refuses what is not harmony
                for item in self._parser.feed(token):
                    if isinstance(item, MessageStarted):
                        h = item.header
                        fields = h.role, h.channel, h.recipient, h.content_type
                        self._started(classify(*fields, strict=True))
                    elif isinstance(item, ContentDelta):
                        self._delta(item.text)
                    elif isinstance(item, MessageDone):
                        self._done(item.message)
            except HarmonyError as exc:
                return self._finish(StopReason.ERROR, error=exc)
        return State.SAMPLING

    def _on_items(self, event: object) -> State:
        assert isinstance(event, ItemsSampled) and self._parser is not None
        self._completion_tokens += event.count
        for item in event.events:
            if isinstance(item, harmonia.ItemAdded):
                self._item = item.item
                self._started(item.item)
            elif isinstance(item, harmonia.ItemDelta):
                self._delta(item.text)
            elif isinstance(item, harmonia.ItemDone) and item.item.message is not None:
                self._item = None
                self._done(item.item.message)
        return State.SAMPLING

    def _on_generation_finished(self, event: object) -> State:
        assert isinstance(event, GenerationFinished)
        reason = event.finish.reason
        if reason is FinishReason.STOP:
            return self._on_stop(event.finish.stop_token)
        if reason is FinishReason.LENGTH:
            spent = self._completion_tokens >= self._limits.max_tokens
            return self._finish(StopReason.MAX_TOKENS if spent else StopReason.LENGTH)
        if reason is FinishReason.CANCELLED:
            return self._finish(StopReason.CANCELLED)
        error = event.error or ModelOutputError(event.finish.message or "the engine failed")
        return self._finish(StopReason.ERROR, error=error)

    def _on_tool_result(self, event: object) -> State:
        assert isinstance(event, ToolResult) and self._pending is not None
        call, self._pending = self._pending, None
        if event.reply is None:
            return self._finish(StopReason.TOOL_CALLS, tool_calls=(call,))
        self._new.append(event.reply)
        self._events.append(ToolResultReceived(call, event.reply))
        return self._next_sample()

    def _on_cancel(self, event: object) -> State:
        assert isinstance(event, Cancel)
        return self._finish(event.reason)

    # -- helpers ---------------------------------------------------------------------

    def _next_sample(self) -> State:
        if self._steps >= self._limits.max_steps:
            return self._finish(StopReason.MAX_STEPS)
        if self._completion_tokens >= self._limits.max_tokens:  # before rendering: spent
            return self._finish(StopReason.MAX_TOKENS)
        conversation = self.conversation
        prompt = self._first_prompt
        if prompt is None or self._steps:
            prompt = tuple(
                self._enc.render_conversation_for_completion(
                    conversation, Role.ASSISTANT, self._config
                )
            )
        left = self._limits.budget(len(prompt), self._completion_tokens)
        if left <= 0:  # max_tokens is not spent: the prompt filled the context window
            return self._finish(StopReason.LENGTH)
        constraint = self._constraint(conversation) if self._constraint else None
        params = self._params
        if params.max_tokens > left:
            params = replace(params, max_tokens=left)
        self._steps += 1
        self._prompt_tokens += len(prompt)
        self._parser = StreamableParser(self._enc, Role.ASSISTANT, strict=True)
        self._header_kind, self._calls, self._item = None, False, None
        self._action = Sample(prompt, params, constraint)
        return State.SAMPLING

    def _started(self, read: Reading | OutputItem) -> None:
        self._calls = read.kind == "call"  # a call's body is shown whole when it is complete
        kind = COMMENTARY if read.phase == COMMENTARY else read.kind
        self._header_kind = _DELTAS.get(kind) if self._deltas else None

    def _delta(self, text: str) -> None:
        if self._header_kind is not None:
            self._events.append(self._header_kind(text))

    def _done(self, message: Message) -> None:
        self._new.append(message)
        self._events.append(MessageCompleted(message))
        if self._calls:
            self._events.append(ToolCallStarted(message))
        self._header_kind = None

    def _on_stop(self, stop_token: int | None) -> State:
        last = self._new[-1] if self._new else None
        if stop_token == self._call_id:
            if last is None or not self._calls:
                error = ModelOutputError(
                    "the model ended its turn with <|call|> on a message addressed to no tool"
                )
                return self._finish(StopReason.ERROR, error=error)
            self._pending = last
            self._action = RunTool(last)
            return State.TOOLS
        return self._finish(StopReason.FINAL)

    def _partial(self) -> Message | None:
        parser, item = self._parser, self._item
        if item is not None and item.text:  # read by the caller (ItemsSampled)
            message = Message.from_role_and_content(Role.ASSISTANT, item.text)
            message.channel, message.recipient = item.channel, item.recipient
            message.content_type = item.content_type
            return message
        if parser is None or parser.current_role is None or not parser.current_content:
            return None
        return Message(
            author=Author(parser.current_role),
            content=[TextContent(parser.current_content)],
            channel=parser.current_channel,
            recipient=parser.current_recipient,
            content_type=parser.current_content_type,
        )

    def _finish(
        self,
        reason: StopReason,
        *,
        error: HarmonyError | None = None,
        tool_calls: tuple[Message, ...] = (),
    ) -> State:
        partial = None if reason in (StopReason.FINAL, StopReason.TOOL_CALLS) else self._partial()
        result = AgentResult(
            conversation=self.conversation,
            messages=tuple(self._new),
            stop_reason=reason,
            usage=Usage(self._prompt_tokens, self._completion_tokens),
            steps=self._steps,
            tool_calls=tool_calls,
            error=error,
            partial=partial,
        )
        self._result = result
        self._parser = None
        self._events.append(Done(result))
        self._action = Finished(result)
        return State.DONE


#: The delta event of a message's text, by its reading (a call's body: none).
_DELTAS: Final[dict[str, _DeltaKind]] = {
    "reasoning": ReasoningDelta,
    COMMENTARY: PreambleDelta,
    "text": FinalDelta,
}


_TRANSITIONS: Final[dict[tuple[State, type], _Handler]] = {
    (State.IDLE, Start): AgentLoop._on_start,
    (State.SAMPLING, TokensSampled): AgentLoop._on_tokens,
    (State.SAMPLING, ItemsSampled): AgentLoop._on_items,
    (State.SAMPLING, GenerationFinished): AgentLoop._on_generation_finished,
    (State.SAMPLING, Cancel): AgentLoop._on_cancel,
    (State.TOOLS, ToolResult): AgentLoop._on_tool_result,
    (State.TOOLS, Cancel): AgentLoop._on_cancel,
}

_EXPECTED: Final = {
    State.IDLE: "send Start() first",
    State.SAMPLING: "send TokensSampled (or ItemsSampled), GenerationFinished or Cancel",
    State.TOOLS: "send the pending call's ToolResult, or Cancel",
    State.DONE: "the run is over; read AgentLoop.result",
}
