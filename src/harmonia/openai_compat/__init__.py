"""OpenAI Chat Completions and Responses API <-> harmony, in both directions.

Plain JSON-ready dicts in and out; the ``openai`` package is not needed at run
time. See ``docs/openai-compat.md`` for a server example and every mapping rule.
"""

from .._turn import (
    ItemAdded,
    ItemDelta,
    ItemDone,
    OutputAssembler,
    OutputDiagnostic,
    OutputEvent,
    OutputItem,
)
from ._chat import chat_completion_from_tokens, chat_request_to_conversation, render_chat_request
from ._chat_stream import ChatCompletionStream
from ._common import PromptOptions
from ._errors import (
    ConflictingReasoningError,
    RequestError,
    ToolCallMatchError,
    UnknownRoleError,
    UnsupportedContentError,
)
from ._ids import IdGenerator, seed_from_tokens
from ._responses import render_responses_request, responses_request_to_conversation
from ._responses_output import BuiltinCalls, response_from_tokens
from ._responses_stream import ResponseStream, ending_events

__all__ = [
    "BuiltinCalls",
    "ChatCompletionStream",
    "ConflictingReasoningError",
    "IdGenerator",
    "ItemAdded",
    "ItemDelta",
    "ItemDone",
    "OutputAssembler",
    "OutputDiagnostic",
    "OutputEvent",
    "OutputItem",
    "PromptOptions",
    "RequestError",
    "ResponseStream",
    "ToolCallMatchError",
    "UnknownRoleError",
    "UnsupportedContentError",
    "chat_completion_from_tokens",
    "chat_request_to_conversation",
    "ending_events",
    "render_chat_request",
    "render_responses_request",
    "response_from_tokens",
    "responses_request_to_conversation",
    "seed_from_tokens",
]
