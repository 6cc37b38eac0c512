"""An agent loop for gpt-oss: sample, parse, run tools, repeat until the answer.

:class:`AgentLoop` is the sans-IO state machine (given what happened, what to
do next); :class:`Agent` drives it over any :mod:`harmonia.engines` engine
and a :class:`harmonia.tools.Toolbox`, async (:meth:`Agent.run`) or blocking
(:meth:`Agent.run_sync`). See ``docs/agent.md``.
"""

from harmonia._options import use_color

from ._agent import Agent, AgentRun, RunHooks, ToolCallback
from ._chat_ui import TerminalView
from ._conversation import new_conversation
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
from ._limits import DEFAULT_MAX_SECONDS, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS, AgentLimits
from ._loop import (
    DEFAULT_COT_POLICY,
    Action,
    AgentLoop,
    Cancel,
    ConstraintFactory,
    Finished,
    GenerationFinished,
    Input,
    ItemsSampled,
    RunTool,
    Sample,
    Start,
    State,
    Step,
    TokensSampled,
    ToolResult,
)

__all__ = [
    "DEFAULT_COT_POLICY",
    "DEFAULT_MAX_SECONDS",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_TOKENS",
    "Action",
    "Agent",
    "AgentEvent",
    "AgentLimits",
    "AgentLoop",
    "AgentResult",
    "AgentRun",
    "Cancel",
    "ConstraintFactory",
    "Done",
    "FinalDelta",
    "Finished",
    "GenerationFinished",
    "Input",
    "ItemsSampled",
    "MessageCompleted",
    "PreambleDelta",
    "ReasoningDelta",
    "RunHooks",
    "RunTool",
    "Sample",
    "Start",
    "State",
    "Step",
    "StopReason",
    "TerminalView",
    "TokensSampled",
    "ToolCallStarted",
    "ToolCallback",
    "ToolResult",
    "ToolResultReceived",
    "new_conversation",
    "use_color",
]
