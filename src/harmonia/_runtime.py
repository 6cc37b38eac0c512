"""What the apps share at run time: timeouts, HTTP clients, keys, ids, SSE frames.

The tools, the engines, the agent and the server each talk to the network and
read the environment; they do it through these few functions, so a default is
written once (:data:`TIMEOUTS`), every HTTP client is built the same way, an
API key is read from one place, and a server-side id or an SSE frame has one
spelling.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from ._errors import HarmonyError, InputError

T = TypeVar("T")


@dataclass(frozen=True)
class Timeouts:
    """Every default timeout, wait and interval of harmonia's apps, in seconds (one table;
    ``tests/test_runtime.py`` fails on a duration default written anywhere else)."""

    #: A tool call, before the dispatcher cancels it (above the python tool's own 120 s,
    #: so that its message wins).
    tool_call: float = 180.0
    #: A Python function tool's call (``function_tool``).
    function_call: float = 60.0
    #: One python tool execution (what gpt-oss was trained to expect: 120 s).
    python_call: float = 120.0
    #: Starting the python tool's sandboxed kernel.
    python_startup: float = 60.0
    #: Connecting to an MCP server and listing its tools.
    mcp_connect: float = 30.0
    #: One request to a web search API (Exa, You.com).
    web_request: float = 30.0
    #: Converting one fetched page to text, in the browser's worker (an 8 MB page takes a few).
    page_conversion: float = 20.0
    #: Opening a connection to an HTTP engine.
    engine_connect: float = 10.0
    #: Silence on an HTTP engine's stream before it counts as stalled.
    engine_read: float = 60.0
    #: After an engine's last event, how long the end of its answer (``[DONE]``, the last
    #: chunk) may take before the connection is closed instead of kept for the next request.
    engine_tail: float = 1.0
    #: A server's write of one response chunk to a slow client.
    client_send: float = 30.0
    #: An agent run, tool calls included (``AgentLimits.max_seconds``).
    agent_run: float = 600.0
    #: What a server with a full queue tells a client to wait (``Retry-After``).
    retry_after: int = 1
    #: An SSE keep-alive comment after this long without data (long prefills).
    sse_ping: float = 15.0
    #: How often a replica looks in the store for cancels other replicas recorded.
    cancel_poll: float = 0.25
    #: How long a cancel sent to another replica waits for it to confirm.
    cancel_wait: float = 5.0
    #: After the drain, uvicorn's own graceful shutdown: only idle connections are left.
    graceful_shutdown: int = 5
    #: After SIGTERM/SIGINT, how long a server's running generations may go on before each
    #: is ended with a terminal event (``--shutdown-timeout``).
    shutdown_drain: float = 30.0
    #: How often a draining server looks whether its running work has finished.
    shutdown_poll: float = 0.05
    #: How long the generations a drain ended get to write their terminal events and close.
    shutdown_close: float = 10.0
    #: Between two probes of an engine server's health (``/health`` calls share one).
    engine_health_probe: float = 1.0
    #: How often the uid-mode sandbox sums a session's resident memory while a call runs.
    memory_watch: float = 0.25
    #: The SQLite response store's wait for a lock another replica holds.
    store_busy: float = 30.0
    #: A Redis response store's connect, and each of its replies (a Redis that is down
    #: refuses at once; this bounds one that hangs); then the request gets a 503.
    store_reply: float = 5.0
    #: How often a background run whose record the store refused (it is down) writes it again.
    store_retry: float = 0.5
    #: A background response's lease: its replica renews it every third of this; one whose
    #: lease ran out is reported failed by any replica that reads it (``--background-lease``).
    background_lease: float = 30.0
    #: After interrupting a python cell, how long the kernel gets before it is restarted.
    python_interrupt_grace: float = 5.0
    #: How often a python cell that prints nothing checks that its kernel is alive.
    kernel_poll: float = 0.25
    #: Asking the host's interpreter for its paths (what the sandbox mounts).
    interpreter_probe: float = 30.0
    #: The sandbox's start-up probe (``sandbox_status``).
    sandbox_probe: float = 60.0


TIMEOUTS = Timeouts()


def api_key(explicit: str | None, env_var: str | None) -> str | None:
    """The explicit key, else the environment variable's value, else ``None``.

    >>> api_key("k", "NO_SUCH_VARIABLE"), api_key(None, None)
    ('k', None)
    """
    if explicit:
        return explicit
    return (os.environ.get(env_var) or None) if env_var else None


def api_keys(env_var: str, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The comma-separated keys in ``env_var`` (none when it is unset or empty).

    >>> api_keys("KEYS", {"KEYS": "a, b,,"})
    ('a', 'b')
    """
    raw = (os.environ if environ is None else environ).get(env_var, "")
    return tuple(key.strip() for key in raw.split(",") if key.strip())


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random id for a server-side object: ``resp_3f9c...`` (``nbytes`` random bytes).

    >>> new_id("req", 8).startswith("req_"), len(new_id("req", 8))
    (True, 20)
    """
    return f"{prefix}_{secrets.token_hex(nbytes)}"


def http_client(
    *,
    connect: float,
    read: float,
    headers: Mapping[str, str] | None = None,
    trust_env: bool = False,
    missing: type[HarmonyError] = HarmonyError,
    hint: str = "pip install httpx",
) -> Any:
    """An ``httpx.AsyncClient``: ``connect`` seconds to connect (and to wait for the
    pool), ``read`` seconds of silence on a read or a write.

    ``trust_env=False`` (the default) keeps proxies named by the environment
    out of the path; without httpx, ``missing`` is raised with ``hint``.
    """
    try:
        import httpx
    except ImportError as exc:
        raise missing(f"httpx is not installed: {hint}") from exc
    timeout = httpx.Timeout(connect=connect, read=read, write=read, pool=connect)
    return httpx.AsyncClient(headers=dict(headers or {}), timeout=timeout, trust_env=trust_env)


def run_sync(start: Callable[[], Coroutine[Any, Any, T]], refusal: str) -> T:
    """Run ``start()`` to the end from blocking code (a fresh event loop).

    Inside a running event loop that would deadlock or nest: :class:`~harmonia.InputError`
    with ``refusal`` (which says what to await instead), and ``start`` is never called.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(start())
    raise InputError(refusal)


#: The end of an OpenAI-style event stream.
SSE_DONE = b"data: [DONE]\n\n"


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One server-sent event: ``event: ...`` (when named) and ``data: ...``.

    >>> sse_frame(b'{"a":1}', "response.created")
    b'event: response.created\\ndata: {"a":1}\\n\\n'
    """
    if event is None:
        return b"data: " + data + b"\n\n"
    head = _EVENT_HEADS.get(event)
    if head is None:  # made once per event name (a Responses stream sends one per token)
        head = b"event: " + event.encode() + b"\ndata: "
        if len(_EVENT_HEADS) < 256:  # the names are the server's own: a few dozen
            _EVENT_HEADS[event] = head
    return head + data + b"\n\n"


_EVENT_HEADS: dict[str, bytes] = {}


class ClosedOnExit(ABC):
    """``async with`` for a resource that has ``aclose``: leaving the block closes it,
    however the block ends (the subclass says what entering does)."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the resource holds."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
