"""Tool runtimes for gpt-oss: the built-in browser and python tools, function tools, MCP.

Importing this package is cheap: each runtime imports its optional dependencies
only when it is built.
"""

from ._base import Tool, ToolCall, ToolOutput

__all__ = ["Tool", "ToolCall", "ToolOutput"]
