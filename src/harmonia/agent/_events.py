"""What a run tells its caller: UI events as they happen, and the result at the end."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harmonia import Conversation, HarmonyError, Message
from harmonia.engines import Usage
from harmonia.vocabulary import FINAL as _FINAL_CHANNEL


class StopReason(str, enum.Enum):
    """Why a run ended."""

    #: The model answered: its turn ended with ``<|return|>``.
    FINAL = _FINAL_CHANNEL
    #: The model called a tool that the caller runs (like Chat Completions ``tool_calls``).
    TOOL_CALLS = "tool_calls"
    #: ``AgentLimits.max_steps`` generations ran without an answer.
    MAX_STEPS = "max_steps"
    #: ``AgentLimits.max_tokens`` completion tokens were spent.
    MAX_TOKENS = "max_tokens"
    #: One generation hit ``SamplingParams.max_tokens``.
    LENGTH = "length"
    #: ``AgentLimits.max_seconds`` passed.
    MAX_SECONDS = "max_seconds"
    #: The caller cancelled the run.
    CANCELLED = "cancelled"
    #: The engine failed, or the model wrote something that is not harmony.
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """New text of the model's reasoning (the ``analysis`` channel)."""

    text: str


@dataclass(frozen=True, slots=True)
class PreambleDelta:
    """New text of a preamble: a ``commentary`` message to the user, before tool calls."""

    text: str


@dataclass(frozen=True, slots=True)
class FinalDelta:
    """New text of the final answer."""

    text: str


@dataclass(frozen=True, slots=True)
class MessageCompleted:
    """A message the model finished (every kind; added to the conversation)."""

    message: Message


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model called a tool: ``message`` is the call (recipient, arguments in ``text``)."""

    message: Message


@dataclass(frozen=True, slots=True)
class ToolResultReceived:
    """A tool answered ``call``; ``reply`` is the message the model reads next."""

    call: Message
    reply: Message


@dataclass(frozen=True, slots=True)
class Done:
    """The run ended; ``result`` says why, with the usage and the conversation."""

    result: AgentResult


AgentEvent = (
    ReasoningDelta
    | PreambleDelta
    | FinalDelta
    | MessageCompleted
    | ToolCallStarted
    | ToolResultReceived
    | Done
)


@dataclass(frozen=True)
class AgentResult:
    """The end of a run.

    * ``conversation``: the whole harmony conversation, the caller's messages
      then the new ones; it renders and parses back to itself (a sampled
      ``<|return|>`` is kept as ``<|end|>``, as history is rendered);
    * ``messages``: the new messages only;
    * ``stop_reason``, ``usage`` (summed over the steps: every prompt and every
      completion), ``steps`` (generations run);
    * ``tool_calls``: with ``TOOL_CALLS``, the calls the caller must answer
      (append a reply to ``conversation`` and run again);
    * ``error``: with ``ERROR``, what failed;
    * ``partial``: the message being written when a limit or a cancellation
      cut it (not in ``conversation``).
    """

    conversation: Conversation
    messages: tuple[Message, ...]
    stop_reason: StopReason
    usage: Usage
    steps: int
    tool_calls: tuple[Message, ...] = ()
    error: HarmonyError | None = None
    partial: Message | None = None

    @property
    def answer(self) -> str | None:
        """The text of the last final-channel message of this run, or ``None``."""
        for message in reversed(self.messages):
            if message.channel == _FINAL_CHANNEL:
                return message.text
        return None
