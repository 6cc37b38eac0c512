"""``harmonia serve``: the OpenAI-compatible server from the command line.

The lead wires it into the ``harmonia`` command with
``harmonia.serve._cli.add_subcommand(subparsers)``; ``python -m
harmonia.serve._cli ...`` runs it alone. Exit status: 0 after a clean
shutdown, 1 when harmonia refuses the configuration, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from harmonia import HarmonyError, InputError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS

from .._options import add_options, from_args
from ..engines import EngineSpec
from ..tools import ToolsSpec
from ..tools._spec import SERVE_SCOPE
from ._config import ServerConfig, api_keys_from_env

if TYPE_CHECKING:
    from ..tools.browser import Backend
    from ._agent_tool_loop import AgentToolLoop

_DEFAULTS = ServerConfig()


_EXAMPLES = """examples:
  harmonia serve --engine vllm --url http://127.0.0.1:8001 --port 8000
  harmonia serve --engine llama.cpp --url http://127.0.0.1:8080
  harmonia serve --engine transformers --engine-model ./gpt-oss-20b --device cuda
  harmonia serve --engine scripted          # a demo model that replays a reply
  harmonia serve --engine random            # random weights, the real format (torch)
  harmonia serve --engine vllm --url http://127.0.0.1:8001 --browser ./notes --python

exit status: 0 after a clean shutdown; 1 a bad option, or an engine that cannot start
(the warm-up generation fails: the server logs why and exits, without retrying);
2 a usage error"""


def add_subcommand(
    subparsers: Any, formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter
) -> argparse.ArgumentParser:
    """Add ``serve`` to an ``argparse`` sub-command set (``func(args, out) -> int``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (Chat Completions, Responses) over an engine",
        description="Serve gpt-oss over /v1/chat/completions and /v1/responses. "
        "API keys come from --api-key or HARMONIA_API_KEYS (comma-separated).",
        epilog=_EXAMPLES,
        formatter_class=formatter_class,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, EngineSpec, title="engine")

    server = parser.add_argument_group("server")
    add_options(server, ServerConfig)
    server.add_argument("--alias", action="append", default=[], help="another accepted name")
    server.add_argument(
        "--api-key", action="append", default=[], help="an accepted Bearer key (repeatable)"
    )
    server.add_argument(
        "--store",
        default=_DEFAULTS.store,
        help="where responses are kept for previous_response_id: memory (default; lost at "
        "exit), sqlite:PATH, redis://HOST:PORT/DB or none",
    )
    server.add_argument(
        "--date",
        default="today",
        help="the system message's 'Current date:' line: today (default; the UTC date of "
        "each request, so cached prefixes change at midnight), a fixed YYYY-MM-DD, or none",
    )
    server.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="an origin browsers may call from (repeatable; CORS is off without one)",
    )
    server.add_argument(
        "--no-warmup", action="store_true", help="report healthy without a warm-up generation"
    )
    server.add_argument("--log-level", default="info", help="debug, info, warning or error")
    add_options(parser, ToolsSpec, scope=SERVE_SCOPE, title="built-in tools (Responses API)")


def build_config(args: argparse.Namespace) -> ServerConfig:
    # The flags named after a field are read by from_args; these are spelled otherwise.
    return replace(
        from_args(ServerConfig, args),
        model_aliases=tuple(args.alias),
        api_keys=tuple(args.api_key) or api_keys_from_env(),
        current_date=None if args.date in ("none", "") else args.date,
        cors_origins=tuple(args.cors_origin),
        warmup=not args.no_warmup,
    )


def build_tool_loop(args: argparse.Namespace) -> tuple[AgentToolLoop | None, Backend | None]:
    """The built-in tools loop ``--browser`` / ``--python`` ask for (and the backend to close)."""
    spec = from_args(ToolsSpec, args)
    if spec.browser is None and not spec.python:
        return None, None
    from ._agent_tool_loop import AgentToolLoop

    spec.check()  # a sandbox that cannot start is refused at start-up, as in chat
    backend = None if spec.browser is None else spec.backend(index=True)
    return AgentToolLoop(browser=backend, python=spec.python, tools=spec), backend


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Build the engine and app and serve until interrupted."""
    import asyncio

    try:
        import uvicorn

        from ._app import create_app
    except ImportError as exc:
        raise InputError(
            f"harmonia serve needs the serve extra ({exc.name} is missing): {install_hint('serve')}"
        ) from None

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = build_config(args)
    tool_loop, backend = build_tool_loop(args)
    engine = from_args(EngineSpec, args).build()
    app = create_app(engine, config, tool_loop=tool_loop)
    log = logging.getLogger("harmonia.serve")
    log.info("responses are stored in %s", describe_store(config.store))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=args.log_level,
            access_log=False,  # the app logs each request with its id
            timeout_graceful_shutdown=TIMEOUTS.graceful_shutdown,
        )
    )
    service = app.state.service

    def start_failed() -> None:  # one behaviour: an engine that cannot start ends the server
        server.should_exit = True

    service.on_start_failure = start_failed
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the signal after its graceful shutdown
        pass
    finally:
        asyncio.run(engine.aclose())
        if backend is not None:
            asyncio.run(backend.aclose())
    if service.failed:
        print(f"harmonia serve: {service.not_ready_reason}; exiting", file=sys.stderr)
        return 1
    return 0


def describe_store(store: str) -> str:
    """Where ``--store`` keeps responses, in words (never a Redis URL's password)."""
    if store == "memory":
        return "memory (lost at exit; --store sqlite:PATH keeps them on disk)"
    if store == "none":
        return "nothing (--store none: previous_response_id cannot be used)"
    if store.startswith("sqlite:"):
        return f"the SQLite file {os.path.abspath(store[len('sqlite:') :])}"
    return "Redis at " + store.split("@")[-1].split("/")[0]


def main(argv: Sequence[str] | None = None) -> int:
    """``harmonia serve`` on its own: parse ``argv`` and serve."""
    parser = argparse.ArgumentParser(prog="harmonia serve")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, sys.stdout)
    except HarmonyError as exc:
        print(f"harmonia serve: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
