"""Shared fixtures for the engine tests: the tiny random gpt-oss, fake servers.

The forced (teacher-forcing) matcher is ``random_model_steering.ForcedMatcher``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def torch_modules() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (harmonia[transformers])"
    )
    return torch, transformers


@pytest.fixture(scope="session")
def gptoss_model(torch_modules: tuple[Any, Any]) -> Any:
    """A randomly initialised gpt-oss: real vocabulary, 2 layers, hidden 64, 4 experts."""
    from harmonia.engines.transformers import random_gpt_oss

    return random_gpt_oss(seed=0)


@pytest.fixture(scope="session")
def transformers_engine(gptoss_model: Any) -> Any:
    from harmonia.engines.transformers import TransformersEngine

    return TransformersEngine(gptoss_model)


# -- fake HTTP servers on 127.0.0.1 ----------------------------------------------------------


class Exchange:
    """One request to a fake server, and the tools to answer it (JSON or chunked SSE)."""

    def __init__(self, handler: http.server.BaseHTTPRequestHandler, server: FakeServer) -> None:
        self._handler = handler
        self._server = server
        self.path = handler.path
        self.headers = {k.lower(): v for k, v in handler.headers.items()}
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        self.body: Any = json.loads(raw) if raw else None
        self.sent: list[float] = []  # when each SSE event went out
        self.disconnected_at: float | None = None
        # Set once the server has seen the client leave: a test waits on it instead
        # of sleeping a guessed time (a loaded machine may need longer than any guess).
        self.gone = threading.Event()

    def json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self._handler.send_response(status)
        self._handler.send_header("Content-Type", "application/json")
        self._handler.send_header("Content-Length", str(len(data)))
        self._handler.end_headers()
        self._handler.wfile.write(data)

    def start_sse(self) -> None:
        self._handler.send_response(200)
        self._handler.send_header("Content-Type", "text/event-stream")
        self._handler.send_header("Transfer-Encoding", "chunked")
        self._handler.end_headers()

    def client_gone(self) -> bool:
        """True once the client closed its end (seen without writing anything)."""
        if self.disconnected_at is not None:
            return True
        sock = self._handler.connection
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            try:
                gone = sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                self._left()
                return True
        return False

    def _left(self) -> None:
        self.disconnected_at = time.perf_counter()
        self.gone.set()

    def raw(self, text: str) -> bool:
        """Write ``text`` as one chunk; False when the client is gone."""
        if self.client_gone():
            return False
        data = text.encode()
        # Counted before the write: once the client has read the event, a test that
        # looks at ``sent`` must find it there (after the write, the client's thread
        # may look first).
        self.sent.append(time.perf_counter())
        try:
            self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._handler.wfile.flush()
        except OSError:
            self.sent.pop()
            self._left()
            return False
        return True

    def event(self, payload: Any) -> bool:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        return self.raw(f"data: {data}\n\n")

    def end_sse(self) -> None:
        with contextlib.suppress(OSError):
            self._handler.wfile.write(b"0\r\n\r\n")
            self._handler.wfile.flush()

    def sleep(self, seconds: float) -> bool:
        """Wait, watching the connection; False as soon as the client is gone."""
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if self.client_gone():
                return False
            time.sleep(0.002)
        return not self.client_gone()


Handler = Callable[[Exchange], None]


class FakeServer:
    """A real HTTP server on a free 127.0.0.1 port that records what it receives."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.exchanges: list[Exchange] = []
        outer = self

        class RequestHandler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                exchange = Exchange(self, outer)
                outer.exchanges.append(exchange)
                outer.handler(exchange)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def bodies(self) -> list[Any]:
        return [e.body for e in self.exchanges]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def fake_server() -> Iterator[Callable[[Handler], FakeServer]]:
    """Start fake servers with a handler; all are stopped after the test."""
    servers: list[FakeServer] = []

    def start(handler: Handler) -> FakeServer:
        server = FakeServer(handler)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def closed_port_url() -> str:
    """An http:// address on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
