"""What the serve tests share: a real uvicorn server on 127.0.0.1 with a scripted engine.

A plain module (imported as ``serve_support``: pytest puts this folder on
``sys.path``), because test files must not import ``conftest``, which is
ambiguous when several test folders have one; the fixtures are in conftest.py.
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="harmonia[serve] (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="harmonia[serve] (uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai client (dev extra) is not installed")

import uvicorn

import harmonia
from harmonia.engines import Generation, Script, ScriptedEngine
from harmonia.serve import ServerConfig, create_app

ENC = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
MODEL = "gpt-oss-test"
DEFAULT_REPLY = "<|channel|>final<|message|>ok<|return|>"


def harmony(text: str) -> tuple[int, ...]:
    """Harmony completion text -> token ids (special tokens allowed)."""
    return tuple(ENC.encode(text, allowed_special="all"))


class Book:
    """The scripts the engine replays, queued by a test; a default reply when empty."""

    def __init__(self) -> None:
        self.queue: collections.deque[Script] = collections.deque()

    def add(self, text: str | tuple[int, ...], **faults: Any) -> None:
        tokens = harmony(text) if isinstance(text, str) else text
        self.queue.append(Script(tokens, **faults))

    def __call__(self, prompt: tuple[int, ...]) -> Script:
        return self.queue.popleft() if self.queue else Script(harmony(DEFAULT_REPLY))


class RecordingEngine(ScriptedEngine):
    """A scripted engine that keeps every generation it started (to inspect cancellation)."""

    def __init__(self, book: Book) -> None:
        super().__init__(book)
        self.generations: list[Generation] = []

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Generation:
        generation = super().generate(prompt, params, constraint=constraint)
        self.generations.append(generation)
        return generation


@dataclass
class Server:
    url: str
    book: Book
    engine: RecordingEngine
    app: Any
    thread: threading.Thread
    server: uvicorn.Server
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, **kwargs: Any) -> Any:
        import openai

        kwargs.setdefault("api_key", "unused")
        return openai.OpenAI(base_url=self.base_url, max_retries=0, timeout=20, **kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        import openai

        kwargs.setdefault("api_key", "unused")
        return openai.AsyncOpenAI(base_url=self.base_url, max_retries=0, timeout=20, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(engine_factory: Callable[[Book], Any] | None = None, **config: Any) -> Server:
    """A uvicorn server on a free loopback port, ready (warm-up done) when returned.

    ``engine_factory(book)`` builds another engine than the recording scripted one.
    """
    book = Book()
    engine = (engine_factory or RecordingEngine)(book)
    config.setdefault("model", MODEL)
    config.setdefault("store", "memory")
    port = free_port()
    tool_loop = config.pop("tool_loop", None)
    app = create_app(engine, ServerConfig(port=port, **config), tool_loop=tool_loop)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not (server.started and app.state.service.ready):
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    return Server(f"http://127.0.0.1:{port}", book, engine, app, thread, server)


def post(server: Server, path: str, body: Any, **kwargs: Any) -> Any:
    """A raw POST (httpx) to the server; returns the httpx response."""
    import httpx

    return httpx.post(server.base_url + path, json=body, timeout=20, **kwargs)


def sse(server: Server, path: str, body: dict[str, Any]) -> list[Any]:
    """POST a streaming request; the JSON payloads of its SSE ``data:`` lines, in order."""
    import json

    import httpx

    payloads: list[Any] = []
    with httpx.stream("POST", server.base_url + path, json=body, timeout=20) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[6:]
                payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads
