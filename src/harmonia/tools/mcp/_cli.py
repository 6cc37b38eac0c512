"""``harmonia tools serve-mcp``: the built-in browser or python tool as an MCP server.

vLLM's ``--tool-server HOST:PORT`` connects to such a server in place of the
gpt-oss reference's browser and python servers (see :mod:`._server`). One
runtime is built per client session (vLLM sends ``x-session-id``), so cursors
and kernels never leak between conversations.

The ``harmonia`` command adds this subcommand through :func:`add_subcommand`;
nothing here imports mcp, uvicorn or a tool's extras until the server starts.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from dataclasses import replace
from typing import Any, TextIO

from ... import InputError, ToolNamespaceConfig
from ..._errors import install_hint
from ..._options import Commands, add_flags, add_options, flag, from_args
from .._base import Tool
from .._spec import MCP_SCOPE, ToolsSpec

DEFAULT_PORT = 8001


def add_subcommand(commands: Commands) -> argparse.ArgumentParser:
    """Add ``tools`` (``serve-mcp``, ``browser``, ``python``) to a command's
    :class:`~harmonia._options.Commands`."""
    tools = commands.add(
        "tools",
        "run harmonia's built-in tools outside an agent loop",
        description="Run harmonia's built-in tools outside an agent loop.",
    )
    tools_sub = commands.nested(tools, "tools_command", "what to run")
    serve = tools_sub.add(
        "serve-mcp",
        "serve the browser or python tool over MCP (for vLLM's --tool-server)",
        run,
        description=(
            "Serve the browser or python tool as an MCP server: SSE on /sse (what vLLM's "
            "--tool-server connects to) and Streamable HTTP on /mcp, or stdio with --stdio."
        ),
        epilog=(
            "examples:\n"
            "  harmonia tools serve-mcp browser --browser docs/ --port 8001\n"
            "  harmonia tools serve-mcp python --timeout 60\n"
            "  vllm serve openai/gpt-oss-20b --tool-server 127.0.0.1:8001"
        ),
    )
    add_flags(
        serve,
        flag("tool", "which tool to serve", choices=("browser", "python")),
        flag("--host", "address to listen on", default="127.0.0.1"),
        flag("--port", "port to listen on", type=int, default=DEFAULT_PORT),
        flag("--stdio", "serve one client over stdin/stdout", action="store_true"),
    )
    add_options(serve, ToolsSpec, scope=MCP_SCOPE, title="the tool")
    from .._shell import add_commands

    add_commands(tools_sub)
    return tools


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Build the runtime factory the arguments describe and serve it until interrupted."""
    try:
        import mcp  # noqa: F401

        from ._server import McpToolServer
    except ImportError as exc:
        raise InputError(
            f"harmonia tools serve-mcp needs the mcp extra ({exc.name or exc} is missing): "
            f"{install_hint('mcp')}"
        ) from None

    factory, config = _factory(args)
    server = McpToolServer(factory, config=config)
    if not args.stdio:  # stdout is the protocol's channel with --stdio
        print(f"serving {args.tool} over MCP on http://{args.host}:{args.port}/sse", file=out)
        out.flush()
    try:
        if args.stdio:
            asyncio.run(server.serve_stdio())
        else:
            asyncio.run(server.serve_http(host=args.host, port=args.port))
    except KeyboardInterrupt:
        pass
    return 0


def _factory(args: argparse.Namespace) -> tuple[Any, ToolNamespaceConfig]:
    spec = from_args(ToolsSpec, args)
    if args.tool == "browser":
        return _browser_factory(spec)
    if spec.browser is not None:
        raise InputError("--browser is a browser option: serve-mcp browser --browser ...")
    from ..python import PythonTool

    config = spec.python_config()
    return functools.partial(PythonTool, config), PythonTool(config).namespace_config()


def _browser_factory(spec: ToolsSpec) -> tuple[Any, ToolNamespaceConfig]:
    from ..browser import BrowserTool

    # Built here once, to check the folder (or that the web search key is set) at
    # start and to read the declaration, in memory (the index file is the sessions');
    # sessions build their own in the serving thread, since an SQLite connection
    # belongs to the thread that opened it.
    declaration = BrowserTool(replace(spec, browser_index=":memory:").backend()).namespace_config()

    def browser() -> Tool:
        return BrowserTool(spec.backend())

    return browser, declaration
