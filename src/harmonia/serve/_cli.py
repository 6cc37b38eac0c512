"""``harmonia serve``: the OpenAI-compatible server from the command line.

The ``harmonia`` command adds it with :func:`add_subcommand`; ``python -m
harmonia.serve._cli ...`` runs it alone. Exit status: 0 after a clean
shutdown, 1 when harmonia refuses the configuration, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, TextIO

from harmonia import HarmonyError, InputError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS

from .._options import Commands, add_flags, add_options, flag, flag_words, flags_of, from_args
from ..engines import EngineSpec
from ..tools import ToolsSpec
from ..tools._spec import SERVE_SCOPE
from ._config import ServerConfig, api_keys_from_env

if TYPE_CHECKING:
    from ..tools.browser import Backend
    from ._agent_tool_loop import AgentToolLoop
    from ._shutdown import Shutdown

_DEFAULTS = ServerConfig()
_log = logging.getLogger("harmonia.serve")


_EXAMPLES = """examples:
  harmonia serve --engine vllm --url http://127.0.0.1:8001 --port 8000
  harmonia serve --engine llama.cpp --url http://127.0.0.1:8080
  harmonia serve --engine transformers --engine-model ./gpt-oss-20b --device cuda
  harmonia serve --engine scripted          # a demo model that replays a reply
  harmonia serve --engine random            # random weights, the real format (torch)
  harmonia serve --engine vllm --url http://127.0.0.1:8001 --browser ./notes --python

exit status: 0 after a clean shutdown; 1 a bad option (a --port out of range or in
use too), or an engine that cannot start
(the warm-up generation fails: the server logs why and exits, without retrying);
2 a usage error"""


def add_subcommand(commands: Commands) -> argparse.ArgumentParser:
    """Add ``serve`` to a command's :class:`~harmonia._options.Commands`."""
    parser = commands.add(
        "serve",
        "an OpenAI-compatible HTTP server (Chat Completions, Responses) over an engine",
        run,
        description="Serve gpt-oss over /v1/chat/completions and /v1/responses. "
        "API keys come from --api-key or HARMONIA_API_KEYS (comma-separated).",
        epilog=_EXAMPLES,
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, EngineSpec, title="engine")

    server = add_options(parser, ServerConfig, title="server")
    add_flags(server, flag("--log-level", "debug, info, warning or error", default="info"))
    add_options(parser, ToolsSpec, scope=SERVE_SCOPE, title="built-in tools (Responses API)")


def build_config(args: argparse.Namespace) -> ServerConfig:
    """The server's settings from the flags; an error names the flag, not the field."""
    try:
        config = from_args(ServerConfig, args)
        return config if config.api_keys else replace(config, api_keys=api_keys_from_env())
    except InputError as exc:
        raise InputError(flag_words(str(exc), flags_of(ServerConfig))) from None


def check_port(host: str, port: int) -> None:
    """Refuse a port this host cannot listen on (in use, or not allowed) before the
    engine loads: uvicorn would log it and exit with its own status."""
    if port == 0:
        return
    with _socket(host) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InputError(
                f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                "choose another --port, or stop what listens there"
            ) from None


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
    try:  # said here, once, rather than in each worker
        import uvicorn  # noqa: F401

        from ._app import build_app  # noqa: F401
    except ImportError as exc:
        raise InputError(
            f"harmonia serve needs the serve extra ({exc.name} is missing): {install_hint('serve')}"
        ) from None

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = build_config(args)
    check_port(config.host, config.port)
    if config.workers > 1:
        return _supervise(args, config)
    return _serve(args, config)


def _serve(
    args: argparse.Namespace, config: ServerConfig, sockets: list[socket.socket] | None = None
) -> int:
    """One server process: the engine, the app, uvicorn (on ``sockets`` when given)."""
    import uvicorn

    from ._create import create_app

    tool_loop, backend = build_tool_loop(args)
    engine = from_args(EngineSpec, args).build()
    app = create_app(engine, config, tool_loop=tool_loop)
    _log.info("responses are stored in %s", describe_store(config.store))
    server = _DrainingServer(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=args.log_level,
            access_log=False,  # the app logs each request with its id
            # after the drain: only idle connections are left
            timeout_graceful_shutdown=TIMEOUTS.graceful_shutdown,
        ),
        app.state.shutdown,
        config.shutdown_timeout_s,
    )
    service = app.state.service

    # One behaviour: an engine that cannot start ends the server.
    service.on_start_failure = functools.partial(setattr, server, "should_exit", True)
    service.on_ready = _tune_collector
    try:
        server.run(sockets=sockets)
    finally:
        asyncio.run(engine.aclose())
        if backend is not None:
            asyncio.run(backend.aclose())
    if service.failed:
        print(f"harmonia serve: {service.not_ready_reason}; exiting", file=sys.stderr)
        return 1
    return 0


#: Allocations between two young-generation collections once serving (Python's: 700).
GC_YOUNG_THRESHOLD: Final = 100_000


def _tune_collector() -> None:
    """Once started: what start-up built out of the cyclic collector's reach, and fewer
    young collections.

    The vocabulary's tables and the app are some 70,000 tracked objects that
    live as long as the server; every full collection walked all of them, and
    under load the objects of hundreds of open streams set one off every few
    seconds (issue 34). Frozen, a collection walks only what requests made
    (start-up's garbage is collected first, not frozen). A request leaves no
    cycle behind (``tests/serve/test_serve_collector.py`` holds it to that):
    reference counting frees all it made, so what a young collection finds is
    the live state of the open streams, walked again and again for nothing
    (some 10 ms a collection at 256 streams, a pointer chase per object). At
    700 allocations that was about a fifth of the server's CPU; at 10,000,
    with each request's state held by cycles until collected, 9% (streams of
    100 ids) to 24% (of 10); at 100,000, without the cycles, 1% to 4%,
    measured with ``gc.callbacks``.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def _socket(host: str) -> socket.socket:
    """A TCP socket for ``host`` that binds as uvicorn binds: a port left in TIME_WAIT by a
    server that just stopped is free."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


def _supervise(args: argparse.Namespace, config: ServerConfig) -> int:
    """``--workers N``: N server processes on one port (SO_REUSEPORT), signals passed on.

    Each worker is a whole server (its engine client, its admission, its
    drain on SIGTERM); they share the store, and their metrics through a
    folder (``/metrics`` answers the sum). The workers run in their own
    process group, so a terminal's Ctrl-C reaches them once, through here.
    """
    import multiprocessing
    import secrets
    import shutil
    import signal
    import tempfile

    from ._compact import COMPACTION_KEY_ENV

    # A compaction item sealed by one worker must open on another: without a key from the
    # environment, the workers share one made here (they inherit the environment).
    os.environ.setdefault(COMPACTION_KEY_ENV, secrets.token_hex(32))
    folder = tempfile.mkdtemp(prefix="harmonia-metrics-")
    context = multiprocessing.get_context("spawn")  # nothing of this process is inherited
    workers = [
        context.Process(target=_worker, args=(args, i, folder))  # each builds its config
        for i in range(config.workers)
    ]
    _log.info("starting %d workers on %s:%d", config.workers, config.host, config.port)

    def forward(signum: int, frame: Any) -> None:
        for worker in workers:
            if worker.pid is not None and worker.is_alive():
                os.kill(worker.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for worker in workers:
            worker.start()
        codes = []
        for worker in workers:
            worker.join()
            codes.append(worker.exitcode or 0)
            if worker.exitcode:  # one cannot serve: the others stop too (one behaviour)
                forward(signal.SIGTERM, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if any(codes) else 0


def _worker(args: argparse.Namespace, index: int, folder: str) -> None:
    """One worker of ``--workers N`` (a spawned process): serve on a SO_REUSEPORT socket."""
    os.setpgrp()  # signals come from the supervisor only
    config = replace(build_config(args), worker_index=index, metrics_dir=folder)
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s[w{config.worker_index}]: %(message)s",
    )
    sock = _socket(config.host)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # the kernel spreads connections
    sock.bind((config.host, config.port))
    sock.set_inheritable(True)
    try:
        code = _serve(args, config, [sock])
    except HarmonyError as exc:
        print(f"harmonia serve: {exc}", file=sys.stderr)
        code = 1
    sys.exit(code)


def _DrainingServer(config: Any, shutdown: Shutdown, timeout_s: float) -> Any:
    """A uvicorn server whose first SIGTERM/SIGINT drains the app before it stops.

    uvicorn's own handling closes the listening socket at once and cancels
    streams still running after its timeout (a traceback, a stream with no end);
    here the first signal starts :meth:`Shutdown.drain`, the server stops once
    it is over, and a second signal makes the drain end the running work now.
    """
    import uvicorn

    class Server(uvicorn.Server):
        loop: asyncio.AbstractEventLoop | None = None
        draining: asyncio.Future[None] | None = None
        signals = 0

        async def startup(self, sockets: Any = None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().startup(sockets=sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            # Not uvicorn's: it would re-raise the signal once stopped (SIGTERM: exit -15).
            self.signals += 1
            if self.loop is None or not self.started:
                self.should_exit = True  # still starting: nothing runs yet
            elif self.signals == 1:
                self.loop.call_soon_threadsafe(self._drain)
            elif self.signals == 2:  # end the running work now, with its terminal events
                self.loop.call_soon_threadsafe(shutdown.hurry)
            else:  # something does not end: stop without waiting any more
                self.should_exit = self.force_exit = True

        def _drain(self) -> None:
            shutdown.begin()  # now, before any request that comes next is read

            async def drain() -> None:
                await shutdown.drain(timeout_s)
                self.should_exit = True

            self.draining = asyncio.ensure_future(drain())

    return Server(config)


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
