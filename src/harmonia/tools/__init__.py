"""Tool runtimes for gpt-oss: the built-in browser and python tools, function tools, MCP.

Importing this package is cheap: each runtime imports its optional dependencies
only when it is built.
"""

from ._arguments import load_arguments, validate_arguments
from ._base import Tool, ToolCall, ToolOutput
from ._dispatch import DEFAULT_TIMEOUT, Toolbox, is_tool_call, tool_reply

__all__ = [
    "DEFAULT_TIMEOUT",
    "Tool",
    "ToolCall",
    "ToolOutput",
    "Toolbox",
    "is_tool_call",
    "load_arguments",
    "tool_reply",
    "validate_arguments",
]
