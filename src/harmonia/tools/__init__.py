"""Tool runtimes for gpt-oss: the built-in browser and python tools, function tools, MCP.

Importing this package is cheap: each runtime imports its optional dependencies
only when it is built.
"""

from ._arguments import load_arguments, validate_arguments
from ._base import Tool, ToolCall, ToolOutput
from ._dispatch import DEFAULT_TIMEOUT, Toolbox, is_tool_call, tool_reply
from ._functions import DEFAULT_FUNCTION_TIMEOUT, FunctionTool, FunctionTools, function_tool
from ._schema import harmonize_schema, schema_for
from ._spec import ToolsSpec

__all__ = [
    "DEFAULT_FUNCTION_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "FunctionTool",
    "FunctionTools",
    "Tool",
    "ToolCall",
    "ToolOutput",
    "Toolbox",
    "ToolsSpec",
    "function_tool",
    "harmonize_schema",
    "is_tool_call",
    "load_arguments",
    "schema_for",
    "tool_reply",
    "validate_arguments",
]
