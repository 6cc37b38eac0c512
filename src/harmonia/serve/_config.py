"""The server's settings: every limit and default lives here, once."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harmonia import InputError

from .._options import option
from .._runtime import TIMEOUTS, api_keys
from ..openai_compat import PromptOptions
from ..vocabulary import COT_POLICY_NAMES, DEFAULT_COT_POLICY

#: Generations at once when neither the config nor the engine says: vLLM's own default
#: batch (``--max-num-seqs``) on a GPU is of this order, and a front end that admits
#: fewer starves it; an engine that runs fewer queues the rest itself.
DEFAULT_MAX_CONCURRENT = 256

#: The environment variable read for API keys when none are given (comma-separated).
API_KEYS_ENV = "HARMONIA_API_KEYS"


#: The largest TCP port.
MAX_PORT = 65535


@dataclass(frozen=True)
class ServerConfig:
    """Limits, defaults and policies of one harmonia server.

    The defaults are safe for one machine: loopback only, no API keys, CORS
    off, a bounded queue, a bounded in-memory response store. API keys are never shown
    in the repr.

    >>> config = ServerConfig(api_keys=("sk-secret",))
    >>> "sk-secret" in repr(config)
    False
    """

    #: The model name ``/v1/models`` lists and requests must name (or an alias).
    model: str = option("gpt-oss-120b", help="the model name to serve")
    model_aliases: tuple[str, ...] = option((), flag="--alias", help="another accepted name")
    host: str = option("127.0.0.1", help="address to listen on")
    port: int = option(8000, help="port to listen on")
    #: Accepted Bearer tokens; empty: no authentication. Each key is a tenant: the
    #: responses it makes are its own (another key gets a 404, as for a missing id).
    api_keys: tuple[str, ...] = option(
        (), flag="--api-key", help="an accepted Bearer key (repeatable)", repr=False
    )
    #: Generations running at once; more wait in a queue of ``queue_size``, then 429.
    #: ``None``: as many as the engine says it runs at once (llama-server: its slots),
    #: else :data:`DEFAULT_MAX_CONCURRENT`.
    max_concurrent: int | None = option(
        None,
        help="generations at once; more wait in the queue (default: as many as the engine "
        "runs at once, llama-server's slots, else 256)",
    )
    queue_size: int = option(256, help="requests that may wait; beyond, 429 with Retry-After")
    #: Seconds a client is told to wait (``Retry-After``) when the queue is full.
    retry_after_s: int = TIMEOUTS.retry_after
    #: Largest request body, in bytes (413 beyond).
    max_body_bytes: int = option(4 * 1024 * 1024, help="request size limit")
    #: Largest rendered prompt, in tokens (400 ``context_length_exceeded`` beyond).
    max_input_tokens: int = option(120_000, help="prompt tokens a request may render to")
    #: The model's context window in tokens (gpt-oss: 131,072): prompt and output together.
    #: A generation stops (``length`` / ``incomplete``) where the context runs out.
    context_tokens: int = 131_072
    #: Largest ``max_tokens`` / ``max_output_tokens`` a request may ask for (400 beyond);
    #: ``None``: the context (gpt-oss's evals ask for 131,072).
    max_output_tokens: int | None = option(
        None,
        help="the cap on a request's max_tokens / max_output_tokens "
        "(default: the model's context, 131072)",
    )
    #: A client that takes longer than this to accept one SSE write is dropped.
    send_timeout_s: float = option(
        TIMEOUTS.client_send,
        flag="--send-timeout",
        metavar="SECONDS",
        help="seconds a client may stop reading before it is dropped",
    )
    #: An SSE comment is sent after this long without data (long prefills).
    ping_interval_s: float = option(
        TIMEOUTS.sse_ping,
        flag="--ping-interval",
        metavar="SECONDS",
        help="seconds between SSE keep-alive comments while the engine is silent",
    )
    #: ``"memory"`` (the default: bounded, lost on restart, writes no file),
    #: ``"sqlite:PATH"``, ``"redis://HOST:PORT/DB"`` (shared by replicas) or ``"none"``.
    #: Not in the repr: a URL may hold a password.
    store: str = option(
        "memory",
        help="where responses are kept for previous_response_id: memory (default; lost at "
        "exit), sqlite:PATH, redis://HOST:PORT/DB or none",
        repr=False,
    )
    #: Responses the in-memory store keeps (least recently used go first).
    memory_store_size: int = option(
        1000, help="responses the memory store keeps (the least recently used go first)"
    )
    #: How often a replica running background responses looks in the store for cancel
    #: requests other replicas recorded (one query per interval, only while some run).
    cancel_poll_s: float = TIMEOUTS.cancel_poll
    #: How long a cancel sent to another replica than the one running the response waits
    #: for that one to record ``cancelled`` before answering 504 ``cancel_not_confirmed``.
    cancel_wait_s: float = option(
        TIMEOUTS.cancel_wait,
        flag="--cancel-wait",
        metavar="SECONDS",
        help="seconds a cancel of a background response another replica runs waits for "
        "that replica to confirm it (then 504)",
    )
    #: A background response's lease: its replica renews it every third of this, and any
    #: replica that reads a running one whose lease ran out records it ``failed`` (its
    #: replica is gone). The bound on how long a dead replica's responses stay running.
    background_lease_s: float = option(
        TIMEOUTS.background_lease,
        flag="--background-lease",
        metavar="SECONDS",
        help="seconds a replica's lease on each background response it runs lasts (it renews "
        "it every third of that); a running response whose lease ran out is reported failed, "
        "its replica gone",
    )
    #: Server processes on the one port (``harmonia serve`` only; SO_REUSEPORT: the
    #: kernel spreads connections). They share only the store, so ``memory`` needs 1.
    workers: int = option(
        1,
        help="server processes on the one port (more than 1 needs --store sqlite:PATH or "
        "redis://...; /metrics sums them all)",
    )
    #: Set by ``harmonia serve --workers N`` in each worker: its number (answers carry it
    #: as ``x-harmonia-worker``) and the folder where the workers share their metrics.
    worker_index: int | None = field(default=None, repr=False)
    metrics_dir: str | None = field(default=None, repr=False)
    #: After SIGTERM/SIGINT, how long running generations (streams, background responses)
    #: may go on before each is ended with a terminal event (``harmonia serve`` only).
    shutdown_timeout_s: float = option(
        TIMEOUTS.shutdown_drain,
        flag="--shutdown-timeout",
        metavar="SECONDS",
        help="seconds after SIGTERM/SIGINT that running generations may take to finish; "
        "then each ends with a terminal event (a second signal: at once)",
    )
    #: Which earlier analysis messages a prompt keeps (``harmonia.COT_POLICIES``).
    cot_policy: str = option(
        DEFAULT_COT_POLICY,
        choices=COT_POLICY_NAMES,
        help="which earlier reasoning the prompt keeps",
    )
    #: What the system message says beyond the request (identity, date, ...).
    prompt_options: PromptOptions = field(default_factory=PromptOptions)
    #: The system message's ``Current date:`` line, as vLLM and gpt-oss's server write it:
    #: ``"today"`` (the UTC date when each request is rendered), a fixed ``"YYYY-MM-DD"``
    #: (a prefix cache that survives midnight) or ``None`` (no date line). A date in
    #: ``prompt_options`` wins over this.
    current_date: str | None = option(
        "today",
        flag="--date",
        dest="date",  # as data's --date (InputOptions.date)
        help="the system message's 'Current date:' line: today (default; the UTC date of "
        "each request, so cached prefixes change at midnight), a fixed YYYY-MM-DD, or none",
        convert=lambda word: None if word in ("none", "") else word,
    )
    #: The clock ``"today"`` reads (tests inject one).
    clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.timezone.utc), repr=False, compare=False
    )
    #: The Chat message/delta field that carries reasoning: ``"reasoning_content"`` (the
    #: older vLLM/DeepSeek name most clients read) or ``"reasoning"`` (vLLM's newer one).
    chat_reasoning_field: str = option(
        "reasoning_content",
        flag="--reasoning-field",
        choices=("reasoning_content", "reasoning"),
        help="the Chat field that carries reasoning",
    )
    #: Allowed CORS origins; empty: no CORS headers at all.
    cors_origins: tuple[str, ...] = option(
        (),
        flag="--cors-origin",
        help="an origin browsers may call from (repeatable; CORS is off without one)",
    )
    #: Run a one-token generation before ``/health`` turns green.
    warmup: bool = option(
        True, flag="--no-warmup", help="report healthy without a warm-up generation"
    )
    #: Serve ``/v1/responses`` over WebSocket too (when the ASGI server has a WebSocket
    #: library: uvicorn[standard] brings ``websockets``); off, an upgrade is a 426.
    websocket: bool = option(
        True,
        flag="--no-websocket",
        help="refuse WebSocket upgrades of /v1/responses with 426 (clients then use HTTP)",
    )
    #: The BPE engine (``load_harmony_encoding(engine=...)``). ``"quicktok"`` builds its
    #: tables at start-up (~2 s); ``"auto"`` would start in pure Python, where one long
    #: run of a letter takes seconds and holds the GIL, stalling every request.
    bpe_engine: str = "quicktok"

    def __post_init__(self) -> None:
        for rule, bad, names in _BOUNDS:
            for name in names.split():
                value = getattr(self, name)
                if value is not None and bad(value):  # None: the default (said in its help)
                    raise InputError(f"ServerConfig.{name} must be {rule}")
        if not 0 <= self.port <= MAX_PORT:  # uvicorn would log it and listen elsewhere
            raise InputError(
                f"ServerConfig.port must be from 1 to {MAX_PORT} (0: any free port), "
                f"got {self.port}"
            )
        if self.workers > 1 and self.store == "memory":
            raise InputError(
                f"{self.workers} workers cannot share the memory store (each process would "
                "have its own: a response made in one is missing in the others); use "
                "--store sqlite:PATH or --store redis://HOST:PORT/DB (or --store none)"
            )
        if any(not key or key != key.strip() for key in self.api_keys):
            # "Bearer " (stripped) would match an empty key; a padded one would never match.
            raise InputError(
                "ServerConfig.api_keys: an API key must not be empty or start or end with "
                "whitespace"
            )
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise InputError(
                    f"ServerConfig.{name} {getattr(self, name)!r}: use one of {', '.join(choices)}"
                )
        if self.current_date not in (None, "today"):
            try:
                datetime.date.fromisoformat(str(self.current_date))
            except ValueError:
                raise InputError(
                    f"ServerConfig.current_date {self.current_date!r}: use 'today', "
                    "YYYY-MM-DD or None"
                ) from None
        if not (
            self.store in ("memory", "none")
            or self.store.startswith(("sqlite:", "redis://", "rediss://"))
        ):
            # Not the value itself: a Redis URL may hold a password.
            raise InputError(
                "ServerConfig.store: use 'sqlite:PATH', 'redis://HOST:PORT/DB', 'memory' or 'none'"
            )

    def prompt_options_now(self) -> PromptOptions:
        """The prompt options for a request rendered now (its date line filled in)."""
        options = self.prompt_options
        if options.conversation_start_date is not None or self.current_date is None:
            return options
        date = self.current_date
        if date == "today":
            date = self.clock().astimezone(datetime.timezone.utc).date().isoformat()
        return replace(options, conversation_start_date=date)

    @property
    def concurrency(self) -> int:
        """The admission limit before the engine was asked (``max_concurrent`` or the default)."""
        return DEFAULT_MAX_CONCURRENT if self.max_concurrent is None else self.max_concurrent

    @property
    def output_cap(self) -> int:
        """The largest ``max_tokens`` a request may ask for."""
        return self.context_tokens if self.max_output_tokens is None else self.max_output_tokens

    @property
    def model_names(self) -> tuple[str, ...]:
        return (self.model, *self.model_aliases)


#: The fields that take one of a few words, and those words.
_CHOICES: dict[str, tuple[str, ...]] = {
    "chat_reasoning_field": ("reasoning_content", "reasoning"),
    "bpe_engine": ("quicktok", "auto", "python", "tiktoken"),
    "cot_policy": COT_POLICY_NAMES,
}
#: The numeric fields' bounds: the rule, a test for a value that breaks it, the fields.
_BOUNDS: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("at least 1", lambda v: v < 1, "max_body_bytes max_input_tokens context_tokens workers"),
    ("at least 1", lambda v: v < 1, "max_concurrent max_output_tokens"),
    (">= 0", lambda v: v < 0, "queue_size retry_after_s shutdown_timeout_s"),
    ("> 0", lambda v: v <= 0, "send_timeout_s ping_interval_s cancel_poll_s cancel_wait_s"),
    ("> 0", lambda v: v <= 0, "background_lease_s"),
)


def api_keys_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The API keys in ``HARMONIA_API_KEYS`` (comma-separated), if any."""
    return api_keys(API_KEYS_ENV, environ)
