"""MCP both ways: any MCP server as a harmony namespace, harmonia's tools as MCP servers.

Importing this package does not import ``mcp`` (the ``mcp`` extra); building
a toolset or a server does.
"""

from ._client import DEFAULT_CONNECT_TIMEOUT, McpToolset
from ._server import DEFAULT_MAX_SESSIONS, SESSION_HEADER, McpToolServer

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_SESSIONS",
    "SESSION_HEADER",
    "McpToolServer",
    "McpToolset",
]
