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
from typing import Any, TextIO

from ... import InputError, ToolNamespaceConfig
from ..._errors import install_hint
from .._base import Tool

DEFAULT_PORT = 8001


def add_subcommand(sub: Any, formatter_class: type[argparse.HelpFormatter]) -> None:
    """Add ``tools serve-mcp`` to the ``harmonia`` command's subparsers."""
    tools = sub.add_parser(
        "tools",
        help="run harmonia's built-in tools outside an agent loop",
        description="Run harmonia's built-in tools outside an agent loop.",
        formatter_class=formatter_class,
    )
    tools_sub = tools.add_subparsers(
        dest="tools_command", required=True, metavar="COMMAND", help="what to run"
    )
    serve = tools_sub.add_parser(
        "serve-mcp",
        help="serve the browser or python tool over MCP (for vLLM's --tool-server)",
        description=(
            "Serve the browser or python tool as an MCP server: SSE on /sse (what vLLM's "
            "--tool-server connects to) and Streamable HTTP on /mcp, or stdio with --stdio."
        ),
        epilog=(
            "examples:\n"
            "  harmonia tools serve-mcp browser --corpus docs/ --port 8001\n"
            "  harmonia tools serve-mcp python --timeout 60\n"
            "  vllm serve openai/gpt-oss-20b --tool-server 127.0.0.1:8001"
        ),
        formatter_class=formatter_class,
    )
    serve.add_argument("tool", choices=("browser", "python"), help="which tool to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on")
    serve.add_argument("--stdio", action="store_true", help="serve one client over stdin/stdout")
    browser = serve.add_argument_group("browser")
    browser.add_argument("--corpus", help="a folder of Markdown, text and HTML files to search")
    browser.add_argument(
        "--database",
        default=":memory:",
        help="SQLite file for the corpus index, kept between runs",
    )
    browser.add_argument(
        "--web",
        choices=("exa", "you"),
        help="search the web instead of a corpus (key from EXA_API_KEY or YDC_API_KEY)",
    )
    python = serve.add_argument_group("python")
    python.add_argument(
        "--timeout", type=float, default=None, help="seconds per call (default: the tool's, 120)"
    )
    python.add_argument(
        "--dangerously-allow-unsandboxed",
        action="store_true",
        help="run kernels without the sandbox where bubblewrap cannot start (unsafe)",
    )
    serve.set_defaults(func=run)
    from .._shell import add_commands

    add_commands(tools_sub, formatter_class)


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
    if args.tool == "browser":
        return _browser_factory(args)
    if args.corpus or args.web:
        raise InputError("--corpus and --web are browser options")
    from ..python import PythonTool, PythonToolConfig

    settings: dict[str, Any] = {"dangerously_allow_unsandboxed": args.dangerously_allow_unsandboxed}
    if args.timeout is not None:
        settings["timeout"] = args.timeout
    config = PythonToolConfig(**settings)

    def python() -> Tool:
        return PythonTool(config)

    return python, PythonTool(config).namespace_config()


def _browser_factory(args: argparse.Namespace) -> tuple[Any, ToolNamespaceConfig]:
    from ..browser import BrowserTool, ExaBackend, LocalCorpusBackend, YouComBackend

    if (args.corpus is None) == (args.web is None):
        raise InputError("the browser needs exactly one of --corpus DIR or --web exa|you")
    if args.corpus is not None:
        corpus, database = args.corpus, args.database
        # Built here once, to check the folder at start (not per session) and to
        # read the declaration; sessions build their own in the serving thread,
        # since an SQLite connection belongs to the thread that opened it.
        declaration = BrowserTool(LocalCorpusBackend(corpus)).namespace_config()

        def browser() -> Tool:
            return BrowserTool(LocalCorpusBackend(corpus, database=database))

        return browser, declaration
    web = ExaBackend if args.web == "exa" else YouComBackend
    # Built here once: a missing API key is reported now, naming the variable.
    declaration = BrowserTool(web()).namespace_config()

    def web_browser() -> Tool:
        return BrowserTool(web())

    return web_browser, declaration
