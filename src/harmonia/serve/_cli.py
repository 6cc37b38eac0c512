"""``harmonia serve``: the OpenAI-compatible server from the command line.

The lead wires it into the ``harmonia`` command with
``harmonia.serve._cli.add_subcommand(subparsers)``; ``python -m
harmonia.serve._cli ...`` runs it alone. Exit status: 0 after a clean
shutdown, 1 when harmonia refuses the configuration, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from harmonia import HarmonyError, InputError
from harmonia._errors import install_hint

from .._names import COT_POLICY_NAMES
from ..engines import (
    Constraint,
    Engine,
    Generation,
    Script,
    ScriptedEngine,
    UnsupportedConstraintError,
)
from ._config import ServerConfig, api_keys_from_env

if TYPE_CHECKING:
    from ..tools.browser import Backend
    from ._agent_tool_loop import AgentToolLoop

_DEMO_REPLY = (
    "<|channel|>analysis<|message|>A scripted engine: there is no model behind it.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello from harmonia's scripted engine."
    "<|return|>"
)
_DEFAULTS = ServerConfig()


_EXAMPLES = """examples:
  harmonia serve --engine vllm --url http://127.0.0.1:8001 --port 8000
  harmonia serve --engine llama.cpp --url http://127.0.0.1:8080
  harmonia serve --engine transformers --model-path ./gpt-oss-20b --device cuda
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
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--engine",
        required=True,
        choices=("scripted", "random", "transformers", "vllm", "llama.cpp"),
        help="what samples the tokens",
    )
    engine.add_argument("--url", help="vllm / llama.cpp: the engine server's base URL")
    engine.add_argument("--model-path", help="transformers: a model directory or hub id")
    engine.add_argument("--device", default=None, help="transformers: cpu, cuda, ...")
    engine.add_argument("--dtype", default=None, help="transformers: float32, bfloat16, ...")
    engine.add_argument("--engine-model", help="vllm: the model name its server expects")
    engine.add_argument(
        "--llguidance",
        default="1.7",
        help="vllm: the llguidance version its server runs (vLLM 0.32/0.33: 1.7)",
    )
    engine.add_argument(
        "--json-args",
        choices=("schema", "any", "refuse"),
        default="schema",
        help="llama.cpp: compile JSON schemas to GBNF (refusing what it cannot hold), "
        "enforce JSON syntax only, or refuse every schema",
    )
    engine.add_argument(
        "--script", help="scripted: a JSON list of harmony completions (text) to replay in turn"
    )
    engine.add_argument("--script-delay", type=float, default=0.0, help="scripted: s per token")

    server = parser.add_argument_group("server")
    server.add_argument("--host", default=_DEFAULTS.host, help="address to listen on")
    server.add_argument("--port", type=int, default=_DEFAULTS.port, help="port to listen on")
    server.add_argument("--model", default=_DEFAULTS.model, help="the model name to serve")
    server.add_argument("--alias", action="append", default=[], help="another accepted name")
    server.add_argument(
        "--api-key", action="append", default=[], help="an accepted Bearer key (repeatable)"
    )
    server.add_argument(
        "--max-concurrent",
        type=int,
        default=_DEFAULTS.max_concurrent,
        help="generations at once; more wait in the queue",
    )
    server.add_argument(
        "--queue-size",
        type=int,
        default=_DEFAULTS.queue_size,
        help="requests that may wait; beyond, 429 with Retry-After",
    )
    server.add_argument(
        "--max-body-bytes", type=int, default=_DEFAULTS.max_body_bytes, help="request size limit"
    )
    server.add_argument(
        "--max-input-tokens",
        type=int,
        default=_DEFAULTS.max_input_tokens,
        help="prompt tokens a request may render to",
    )
    server.add_argument(
        "--max-output-tokens",
        type=int,
        default=_DEFAULTS.max_output_tokens,
        help="the cap on a request's max_tokens / max_output_tokens "
        "(default: the model's context, 131072)",
    )
    server.add_argument(
        "--send-timeout",
        type=float,
        default=_DEFAULTS.send_timeout_s,
        help="seconds a client may stop reading before it is dropped",
    )
    server.add_argument(
        "--ping-interval",
        type=float,
        default=_DEFAULTS.ping_interval_s,
        help="seconds between SSE keep-alive comments while the engine is silent",
    )
    server.add_argument(
        "--store",
        default=_DEFAULTS.store,
        help="where responses are kept for previous_response_id: memory (default; lost at "
        "exit), sqlite:PATH, redis://HOST:PORT/DB or none",
    )
    server.add_argument(
        "--memory-store-size",
        type=int,
        default=_DEFAULTS.memory_store_size,
        help="responses the memory store keeps (the least recently used go first)",
    )
    server.add_argument(
        "--cancel-wait",
        type=float,
        default=_DEFAULTS.cancel_wait_s,
        help="seconds a cancel of a background response another replica runs waits for "
        "that replica to confirm it (then 504)",
    )
    server.add_argument(
        "--cot-policy",
        default=_DEFAULTS.cot_policy,
        choices=COT_POLICY_NAMES,
        help="which earlier reasoning the prompt keeps",
    )
    server.add_argument(
        "--date",
        default="today",
        help="the system message's 'Current date:' line: today (default; the UTC date of "
        "each request, so cached prefixes change at midnight), a fixed YYYY-MM-DD, or none",
    )
    server.add_argument(
        "--reasoning-field",
        default=_DEFAULTS.chat_reasoning_field,
        choices=("reasoning_content", "reasoning"),
        help="the Chat field that carries reasoning",
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
    tools = parser.add_argument_group("built-in tools (Responses API)")
    tools.add_argument(
        "--browser",
        metavar="DIR|exa|you",
        default=None,
        help="run web_search on the server over a folder of documents, Exa (EXA_API_KEY) "
        "or You.com (YDC_API_KEY) (default: none; the tool is left out of requests)",
    )
    tools.add_argument(
        "--python",
        action="store_true",
        help="run code_interpreter on the server in the bubblewrap python sandbox "
        "(default: off; the tool is left out of requests)",
    )


def build_config(args: argparse.Namespace) -> ServerConfig:
    date = None if args.date in ("none", "") else args.date
    return ServerConfig(
        model=args.model,
        model_aliases=tuple(args.alias),
        host=args.host,
        port=args.port,
        api_keys=tuple(args.api_key) or api_keys_from_env(),
        max_concurrent=args.max_concurrent,
        queue_size=args.queue_size,
        max_body_bytes=args.max_body_bytes,
        max_input_tokens=args.max_input_tokens,
        max_output_tokens=args.max_output_tokens,
        send_timeout_s=args.send_timeout,
        ping_interval_s=args.ping_interval,
        store=args.store,
        memory_store_size=args.memory_store_size,
        cancel_wait_s=args.cancel_wait,
        cot_policy=args.cot_policy,
        current_date=date,
        chat_reasoning_field=args.reasoning_field,
        cors_origins=tuple(args.cors_origin),
        warmup=not args.no_warmup,
    )


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine the arguments name (its optional dependencies imported only now)."""
    if args.engine == "scripted":
        return _scripted(args.script, args.script_delay)
    if args.engine == "random":  # the tests' tiny random-weight gpt-oss: no model needed
        from ..agent._chat_setup import random_engine

        return random_engine()
    if args.engine == "transformers":
        if not args.model_path:
            raise InputError("--engine transformers needs --model-path (a directory or hub id)")
        from ..engines.transformers import TransformersEngine

        kwargs = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v}
        return TransformersEngine.from_pretrained(args.model_path, **kwargs)
    if not args.url:
        raise InputError(f"--engine {args.engine} needs --url (the engine server's base URL)")
    if args.engine == "vllm":
        from ..engines.vllm import VLLMEngine

        return VLLMEngine(args.url, model=args.engine_model, llguidance=args.llguidance)
    from ..engines.llamacpp import LlamaCppEngine

    return LlamaCppEngine(args.url, json_args=args.json_args)


def build_tool_loop(args: argparse.Namespace) -> tuple[AgentToolLoop | None, Backend | None]:
    """The built-in tools loop ``--browser`` / ``--python`` ask for (and the backend to close)."""
    if args.browser is None and not args.python:
        return None, None
    from ._agent_tool_loop import AgentToolLoop, open_backend

    backend = None if args.browser is None else open_backend(args.browser)
    loop = AgentToolLoop(browser=backend, python=args.python)
    if args.python:
        why = loop.python_unavailable()
        if why is not None:  # said at start-up rather than at each request
            logging.getLogger("harmonia.serve").warning("%s", why)
    return loop, backend


def _scripted(path: str | None, delay: float) -> ScriptedEngine:
    from harmonia import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    texts = [_DEMO_REPLY]
    if path is not None:
        with open(path, encoding="utf-8") as file:
            texts = json.load(file)
        if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
            raise InputError(f"{path}: expected a JSON list of harmony completion strings")
    scripts = [Script(tuple(enc.encode(t, allowed_special="all")), delay=delay) for t in texts]
    return _Replay(scripts)


class _Replay(ScriptedEngine):
    """``--engine scripted``: the replies in turn, round and round.

    A request whose constraint (``tool_choice="required"``, a strict
    ``json_schema``) the next reply does not meet is refused before anything
    runs, with a 400 that says so (the reply is not used up): a demo engine
    cannot write what it was not given.
    """

    def __init__(self, scripts: list[Script]) -> None:
        self.replies = scripts
        self.count = 0
        super().__init__(self._next)

    def _next(self, prompt: tuple[int, ...]) -> Script:
        self.count += 1
        return self.replies[(self.count - 1) % len(self.replies)]

    def generate(
        self, prompt: Sequence[int], params: Any = None, *, constraint: Constraint | None = None
    ) -> Generation:
        if constraint is not None:
            script = self.replies[self.count % len(self.replies)]
            matcher = constraint.new_matcher()
            for token in script.tokens:
                try:
                    matcher.consume(token)
                except Exception as exc:
                    raise UnsupportedConstraintError(
                        "the scripted engine's next reply does not meet this request's "
                        f"constraint (tool_choice, strict schema): {exc}; give it replies "
                        "that do (--script)",
                        engine=self.name,
                    ) from None
        return super().generate(prompt, params, constraint=constraint)


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
    engine = build_engine(args)
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
            timeout_graceful_shutdown=5,
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
