"""What the serve tests share: a real uvicorn server on 127.0.0.1 over a test engine.

The engine is the scripted one, or the real transformers engine on a random
gpt-oss teacher-forced to the same scripts (:class:`ForcingEngine`): a test
queues the harmony text the model must write and runs on either.

A plain module (imported as ``serve_support``: pytest puts this folder on
``sys.path``), because test files must not import ``conftest``, which is
ambiguous when several test folders have one; the fixtures are in conftest.py.
"""

from __future__ import annotations

import collections
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings

pytest.importorskip("fastapi", reason="harmonia[serve] (fastapi) is not installed")
pytest.importorskip("uvicorn", reason="harmonia[serve] (uvicorn) is not installed")
pytest.importorskip("openai", reason="the openai client (dev extra) is not installed")

import uvicorn

import harmonia
from harmonia.engines import Constraint, Generation, Script, ScriptedEngine
from harmonia.serve import ServerConfig, StoredResponse, create_app
from random_model_steering import only_next

ENC = harmonia.load_harmony_encoding(harmonia.HarmonyEncodingName.HARMONY_GPT_OSS)
MODEL = "gpt-oss-test"
DEFAULT_REPLY = "<|channel|>final<|message|>ok<|return|>"
#: A turn that thinks, then answers ``Paris.`` (the Responses tests' usual reply).
PARIS = (
    "<|channel|>analysis<|message|>Simple.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
)
#: A Responses function tool without ``strict`` (the prompt shows it as the client wrote it).
LOOKUP_LOOSE = {
    "type": "function",
    "name": "lookup",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    "strict": False,
}
#: A call to it in gpt-oss's own form: the recipient after the channel (the renderer
#: writes it before).
LOOKUP_CALL = (
    "<|channel|>analysis<|message|>Look it up.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json"
    '<|message|>{"word": "x"}<|call|>'
)


def closed_object(**properties: Any) -> dict[str, Any]:
    """A strict-ready JSON schema: an object of exactly ``properties``, each required."""
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {**schema, "additionalProperties": False}


#: A Responses function tool with a strict-ready schema (its call: ``functions.lookup``).
LOOKUP_TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Looks a word up.",
    "parameters": closed_object(word={"type": "string"}),
}
#: The engines the SDK suite runs over (``engine_kind`` in conftest.py).
ENGINES = ("scripted", "transformers")


def harmony(text: str) -> tuple[int, ...]:
    """Harmony completion text -> token ids (special tokens allowed)."""
    return tuple(ENC.encode(text, allowed_special="all"))


class Book:
    """The scripts the engine replays, queued by a test; a default reply when empty.

    ``forced``: the engine is a real model forced to the scripts, which can
    pace its tokens (``delay``) but not inject the scripted engine's faults.
    """

    def __init__(self, *, forced: bool = False) -> None:
        self.queue: collections.deque[Script] = collections.deque()
        self.forced = forced

    def add(self, text: str | tuple[int, ...], **faults: Any) -> None:
        if self.forced and set(faults) - {"delay"}:
            raise AssertionError(
                f"the forced transformers engine cannot inject {sorted(faults)}: "
                "mark the test @pytest.mark.scripted_only(...)"
            )
        tokens = harmony(text) if isinstance(text, str) else text
        self.queue.append(Script(tokens, **faults))

    def __call__(self, prompt: tuple[int, ...]) -> Script:
        return self.queue.popleft() if self.queue else Script(harmony(DEFAULT_REPLY))


class RecordingEngine(ScriptedEngine):
    """A scripted engine that keeps every generation it started and the constraint it got."""

    def __init__(self, book: Book) -> None:
        super().__init__(book)
        self.generations: list[Generation] = []
        self.constraints: list[Constraint | None] = []

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Generation:
        generation = super().generate(prompt, params, constraint=constraint)
        self.generations.append(generation)
        self.constraints.append(constraint)
        return generation


class Forced:
    """A matcher allowing only ``script[position]``, and-ed with the server's grammar.

    The intersection is what makes the forced engine a check of the server: a
    script the request's strict grammar refuses leaves no allowed id, and the
    engine fails ("the matcher's mask is empty") instead of writing it.
    ``delay`` paces the model (seconds per id) like a slower one.
    """

    def __init__(
        self,
        script: tuple[int, ...],
        grammar: Constraint | None,
        delay: float = 0.0,
        matcher: Any = None,
        position: int = 0,
    ) -> None:
        self.script, self.grammar, self.delay = script, grammar, delay
        self.matcher, self.position = matcher, position

    @property
    def is_finished(self) -> bool:
        return self.position >= len(self.script)

    def fill_mask(self, out: Any = None) -> Any:
        if self.delay:
            time.sleep(self.delay)  # on the engine's worker thread
        out = only_next(self.script, self.position, out)
        if self.matcher is not None:
            out &= self.matcher.fill_mask()
        return out

    def consume(self, token: int) -> None:
        assert token == self.script[self.position], (token, self.position)
        self.position += 1
        if self.matcher is not None:
            self.matcher.consume(token)

    def copy(self) -> Forced:
        # The engine copies its constraint's matcher on its worker thread: the
        # grammar compiles there, off the event loop, as the engine's own would.
        if self.matcher is not None:
            matcher = self.matcher.copy()
        elif self.grammar is not None:
            matcher = self.grammar.new_matcher()
        else:
            matcher = None
        return Forced(self.script, self.grammar, self.delay, matcher, self.position)


class ForcingEngine:
    """The real transformers engine on a random gpt-oss, teacher-forced to the book's scripts.

    Each generation allows exactly the next id of the book's next script, and
    only where the server's own constraint allows it; everything else (the
    prefill, the KV cache, the masked sampling, stop ids, cancellation) is the
    engine's.
    """

    name = "transformers-forced"
    supports_logprobs = True  # the transformers engine's, under the forcing mask

    def __init__(self, inner: Any, book: Book) -> None:
        self.inner, self.book = inner, book
        self.prompts: list[tuple[int, ...]] = []
        self.generations: list[Generation] = []
        self.constraints: list[Constraint | None] = []

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Generation:
        self.prompts.append(tuple(prompt))
        self.constraints.append(constraint)
        script = self.book(tuple(prompt))
        forced = Constraint(matcher=Forced(script.tokens, constraint, script.delay))
        generation: Generation = self.inner.generate(prompt, params, constraint=forced)
        self.generations.append(generation)
        return generation

    async def aclose(self) -> None:
        await self.inner.aclose()


def engine_factory(kind: str, model: Any = None) -> Callable[[Book], Any]:
    """Build a test engine of ``kind`` (see :data:`ENGINES`) around a book."""
    if kind == "scripted":
        return RecordingEngine
    from harmonia.engines.transformers import TransformersEngine

    def build(book: Book) -> ForcingEngine:
        book.forced = True
        return ForcingEngine(TransformersEngine(model), book)

    return build


@dataclass
class Server:
    url: str
    book: Book
    engine: Any  # a RecordingEngine or a ForcingEngine
    app: Any
    thread: threading.Thread
    server: uvicorn.Server
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, **kwargs: Any) -> Any:
        """The official sync client; each body it receives is validated (check_sdk_types)."""
        import httpx
        import openai

        kwargs.setdefault("api_key", "unused")
        kwargs.setdefault(
            "http_client", httpx.Client(timeout=20, event_hooks={"response": [_check_sync]})
        )
        return openai.OpenAI(base_url=self.base_url, max_retries=0, timeout=20, **kwargs)

    def async_client(self, **kwargs: Any) -> Any:
        """The official async client, validating like :meth:`client`."""
        import httpx
        import openai

        kwargs.setdefault("api_key", "unused")
        kwargs.setdefault(
            "http_client", httpx.AsyncClient(timeout=20, event_hooks={"response": [_check_async]})
        )
        return openai.AsyncOpenAI(base_url=self.base_url, max_retries=0, timeout=20, **kwargs)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def wait_healthy(port: int, timeout_s: float = 30) -> None:
    """Until the server on ``port`` answers ``/health`` with 200 (it has started)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, "the server did not start"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def metric(server: Server, name: str) -> float:
    """The value of ``name`` (a sample without labels) in the server's ``/metrics``."""
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def request_fuzz(max_examples: int) -> settings:
    """Hypothesis settings of a request fuzz against a running server.

    No deadline (a request's time is the server's, not the test's), no example
    database (the examples depend on the server's state, not just on the input),
    and the server fixtures are reused across examples on purpose.
    """
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def with_empty_queue(server: Server) -> Iterator[Server]:
    """``server`` with an empty script queue, emptied again after the test (for fixtures
    over a server that several tests share)."""
    server.book.queue.clear()
    yield server
    server.book.queue.clear()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server() -> Iterator[str]:
    """A throwaway redis-server on a free loopback port (a generator for a fixture).

    Skips, saying why, where redis-server is not installed or does not start.
    """
    server = RedisProcess()
    try:
        yield server.url
    finally:
        server.stop()


class RedisProcess:
    """A redis-server on a free loopback port, stopped and started again at will.

    With ``folder`` it keeps its data there across restarts (an append-only
    file, synced on every write), as a production Redis would; without, it
    keeps nothing. Skips, saying why, where redis-server is not installed or
    does not start (the first time; a restart that fails is a failure).
    """

    def __init__(self, folder: Path | None = None) -> None:
        import shutil

        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        pytest.importorskip("redis", reason="the redis package (harmonia[serve-redis]) is missing")
        self.binary, self.folder, self.port = binary, folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: Any = None
        self.start(first=True)

    def start(self, first: bool = False) -> None:
        import subprocess

        import redis

        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        if self.folder is None:
            args += ["--appendonly", "no"]
        else:
            args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.folder)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    if first:
                        pytest.skip("redis-server did not start on this machine")
                    raise AssertionError("redis-server did not start again") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop it (SIGTERM: it writes its data first) and wait until it has."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


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
    if path.startswith("/responses"):
        # A Responses stream ends with [DONE] (the OpenResponses spec); the events before it.
        assert payloads and payloads[-1] == "[DONE]", payloads[-1:]
        return payloads[:-1]
    return payloads


# -- every body the SDK receives, validated against the SDK's own types --------------------


def check_sdk_types(method: str, path: str, status: int, content_type: str, body: bytes) -> None:
    """Validate one server answer against the openai SDK's pydantic types.

    The SDK builds its objects without validating them (``construct``), so a
    field of the wrong type or a missing required one would pass unnoticed;
    here each JSON body and each SSE payload is checked with ``model_validate``
    (chat completions and chunks, responses and their stream events, input
    item lists, models) and each error has OpenAI's shape.
    """
    import json

    from openai.types import Model
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseItemList, ResponseStreamEvent
    from pydantic import TypeAdapter

    path = path.removeprefix("/v1")
    if content_type.startswith("text/event-stream"):
        events = TypeAdapter(ResponseStreamEvent)
        for line in body.decode().splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            payload = json.loads(line[6:])
            if "error" in payload and "type" not in payload:  # Chat's error payload
                _check_error(payload)
            elif path.startswith("/chat/completions"):
                ChatCompletionChunk.model_validate(payload)
                check_chat_keys(payload, chunk=True)
            else:
                events.validate_python(payload)
                check_spec_event(payload)
        if not path.startswith("/chat/completions") and body.strip():
            # Every Responses stream ends with ``data: [DONE]`` (the OpenResponses spec).
            assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
        return
    if not content_type.startswith("application/json"):
        return
    payload = json.loads(body)
    if status >= 400:
        _check_error(payload)
    elif path == "/chat/completions":
        ChatCompletion.model_validate(payload)
        check_chat_keys(payload, chunk=False)
    elif path.endswith("/input_items"):
        ResponseItemList.model_validate(payload)
    elif path == "/responses/compact":
        from openai.types.responses import CompactedResponse

        # OpenAI documents the output as the user messages then a compaction item, but the
        # SDK's output-item union only holds assistant messages: it checks the rest.
        others = [i for i in payload["output"] if i.get("role") != "user"]
        CompactedResponse.model_validate({**payload, "output": others})
        spec = _spec()
        if spec is not None:
            spec.CompactResource.model_validate(payload)
    elif path == "/responses" or _is_one_response(method, path):
        Response.model_validate(payload)
        check_spec_response(payload)
    elif path == "/models":
        for model in payload["data"]:
            Model.model_validate(model)
    elif path.startswith("/models/"):
        Model.model_validate(payload)


# -- the OpenResponses spec's own published types (openresponses-types) ---------------------

#: Output items and tools of OpenAI's API that the OpenResponses spec does not define
#: (the built-in tools' calls, ``namespace`` tools): the openai SDK's types check them,
#: the spec's types check the rest of the object around them.
_BEYOND_SPEC_ITEMS = frozenset({"web_search_call", "code_interpreter_call"})


def _spec() -> Any:
    """The ``openresponses_types`` module, or ``None`` where it is not installed (pass 1:
    tests/serve/test_serve_openresponses.py then skips, saying so)."""
    try:
        import openresponses_types
    except ImportError:
        return None
    return openresponses_types


def spec_view(response: dict[str, Any]) -> dict[str, Any]:
    """``response`` as the spec's types can read it: the items and tools of OpenAI's API
    that the spec does not define left out, and the ``schema`` of a ``json_schema``
    text format set to ``None``, because openresponses-types 2.4.0 types it as ``null``
    (its generator's reading of the spec's untyped schema object)."""
    view = dict(response)
    if isinstance(response.get("output"), list):
        view["output"] = [i for i in response["output"] if i.get("type") not in _BEYOND_SPEC_ITEMS]
    if isinstance(response.get("tools"), list):
        view["tools"] = [t for t in response["tools"] if t.get("type") == "function"]
    choice = response.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools"):
        view["tool_choice"] = "auto"  # a built-in tool's choice: not in the spec
    text = response.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        view["text"] = {**text, "format": {**fmt, "schema": None}}
    return view


def check_spec_response(payload: dict[str, Any]) -> None:
    """A ``response`` object against the spec's ``ResponseResource`` (every required key)."""
    spec = _spec()
    if spec is not None:
        spec.ResponseResource.model_validate(spec_view(payload))


def check_spec_event(payload: dict[str, Any]) -> None:
    """A Responses stream event against the spec's model of its type.

    The built-in tools' events are not in the spec (the openai SDK's types check
    them). openresponses-types 2.4.0 names the reasoning text events
    ``response.reasoning.delta`` / ``.done``; the spec itself (its
    ``ResponseReasoningDeltaStreamingEvent`` schema) and OpenAI name them
    ``response.reasoning_text.*``, which is what is sent: they are checked with
    the package's models under the package's name.
    """
    spec = _spec()
    if spec is None:
        return
    kind = payload["type"]
    models = {
        "response.created": spec.ResponseCreatedStreamingEvent,
        "response.queued": spec.ResponseQueuedStreamingEvent,
        "response.in_progress": spec.ResponseInProgressStreamingEvent,
        "response.completed": spec.ResponseCompletedStreamingEvent,
        "response.failed": spec.ResponseFailedStreamingEvent,
        "response.incomplete": spec.ResponseIncompleteStreamingEvent,
        "response.output_item.added": spec.ResponseOutputItemAddedStreamingEvent,
        "response.output_item.done": spec.ResponseOutputItemDoneStreamingEvent,
        "response.content_part.added": spec.ResponseContentPartAddedStreamingEvent,
        "response.content_part.done": spec.ResponseContentPartDoneStreamingEvent,
        "response.output_text.delta": spec.ResponseOutputTextDeltaStreamingEvent,
        "response.output_text.done": spec.ResponseOutputTextDoneStreamingEvent,
        "response.output_text.annotation.added": (
            spec.ResponseOutputTextAnnotationAddedStreamingEvent
        ),
        "response.reasoning_text.delta": spec.ResponseReasoningDeltaStreamingEvent,
        "response.reasoning_text.done": spec.ResponseReasoningDoneStreamingEvent,
        "response.function_call_arguments.delta": (
            spec.ResponseFunctionCallArgumentsDeltaStreamingEvent
        ),
        "response.function_call_arguments.done": (
            spec.ResponseFunctionCallArgumentsDoneStreamingEvent
        ),
        "error": spec.ErrorStreamingEvent,
    }
    model = models.get(kind)
    if model is None:
        assert kind.startswith(("response.web_search_call.", "response.code_interpreter_call")), (
            f"an event type neither the spec nor this check knows: {kind}"
        )
        return
    event = dict(payload)
    if kind.startswith("response.reasoning_text."):
        event["type"] = kind.replace("reasoning_text", "reasoning")
    if "response" in event:
        event["response"] = spec_view(event["response"])
    item = event.get("item")
    if isinstance(item, dict) and item.get("type") in _BEYOND_SPEC_ITEMS:
        return
    model.model_validate(event)


# -- Chat Completions: every key OpenAI's OpenAPI spec requires --------------------------

#: The ``required`` lists of OpenAI's OpenAPI spec (openai/openai-openapi):
#: CreateChatCompletionResponse, its choices and ChatCompletionResponseMessage;
#: CreateChatCompletionStreamResponse and its choices; CompletionUsage; a tool call.
#: The SDK's pydantic models make most of these optional, so they are checked here.
CHAT_REQUIRED = {
    "completion": {"id", "choices", "created", "model", "object"},
    "choice": {"finish_reason", "index", "message", "logprobs"},
    "message": {"content", "refusal", "role"},
    "chunk": {"id", "choices", "created", "model", "object"},
    "chunk_choice": {"delta", "finish_reason", "index"},
    "usage": {"completion_tokens", "prompt_tokens", "total_tokens"},
    "tool_call": {"id", "type", "function"},
    "function": {"name", "arguments"},
}


def check_chat_keys(payload: dict[str, Any], *, chunk: bool) -> None:
    """Every key OpenAI's schema requires of a completion (or a chunk) is present."""

    def need(obj: dict[str, Any], what: str) -> None:
        missing = CHAT_REQUIRED[what] - set(obj)
        assert not missing, f"{what} lacks {sorted(missing)}: {obj}"

    need(payload, "chunk" if chunk else "completion")
    if payload.get("usage") is not None:
        need(payload["usage"], "usage")
    for choice in payload["choices"]:
        need(choice, "chunk_choice" if chunk else "choice")
        if not chunk:
            need(choice["message"], "message")
            for call in choice["message"].get("tool_calls") or ():
                need(call, "tool_call")
                need(call["function"], "function")


def _is_one_response(method: str, path: str) -> bool:
    """``GET /responses/{id}`` or ``POST /responses/{id}/cancel`` (a DELETE answers less)."""
    parts = path.split("/")  # "", "responses", id[, "cancel"]
    if len(parts) == 3 and parts[1] == "responses":
        return method == "GET"
    return len(parts) == 4 and parts[1] == "responses" and parts[3] == "cancel"


def _check_error(payload: Any) -> None:
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}, payload
    assert isinstance(error["message"], str) and error["message"], payload


#: Validation failures seen by the clients' hooks. The SDK turns an exception in a
#: hook into ``APIConnectionError``, which a test expecting an ``APIError`` would
#: accept, so conftest.py also fails any test that leaves one here.
SDK_TYPE_ERRORS: list[str] = []


def _check(response: Any) -> None:
    request = response.request
    try:
        check_sdk_types(
            request.method,
            request.url.path,
            response.status_code,
            response.headers.get("content-type", ""),
            response.content,
        )
    except Exception as exc:
        SDK_TYPE_ERRORS.append(f"{request.method} {request.url.path}: {exc}")
        raise


def _check_sync(response: Any) -> None:
    response.read()  # the SDK then reads the buffered body (streams included)
    _check(response)


async def _check_async(response: Any) -> None:
    await response.aread()
    _check(response)


# -- cancelling a background response on another replica sharing the store -----------------


def check_cancel_across_replicas(owner: Server, other: Server) -> None:
    """A cancel sent to ``other`` stops the background response ``owner`` runs, and only it.

    Two background responses run on the owner, each stalled until cancelled
    (scripted engines). The one cancelled on the other replica stops: its
    generation on the owner is cancelled before either replica reports
    ``cancelled``; the second still runs. Cancelling again, on either replica,
    answers the same. Deleting the second on the other replica stops it too.
    """
    import openai

    for _ in range(2):
        owner.book.add("<|channel|>final<|message|>never finishes<|return|>", stall_after=2)
    first, second = (
        owner.client().responses.create(model=MODEL, input=text, background=True).id
        for text in ("first", "second")
    )
    deadline = time.monotonic() + 5
    while {other.client().responses.retrieve(i).status for i in (first, second)} != {"in_progress"}:
        assert time.monotonic() < deadline, "the background responses did not start"
        time.sleep(0.02)
    prompts = [ENC.decode(list(prompt)) for prompt in owner.engine.prompts]

    def generation_of(text: str) -> Generation:
        (n,) = [n for n, prompt in enumerate(prompts) if f"<|message|>{text}<|end|>" in prompt]
        generation: Generation = owner.engine.generations[n]
        return generation

    generation = {first: generation_of("first"), second: generation_of("second")}
    started = time.monotonic()
    cancelled = other.client().responses.cancel(first)
    assert cancelled.id == first and cancelled.status == "cancelled"
    assert time.monotonic() - started < 2  # the owner looks every cancel_poll_s (0.25 s)
    assert generation[first].done and generation[first].finish.reason.value == "cancelled"
    assert not generation[second].done
    assert owner.client().responses.retrieve(first).status == "cancelled"
    assert other.client().responses.retrieve(second).status == "in_progress"
    for server in (other, owner):  # idempotent, on either replica
        assert server.client().responses.cancel(first).status == "cancelled"
    # Deleting on the other replica cancels too, and the owner does not write it back.
    assert other.client().responses.delete(second) is None
    assert generation[second].done and generation[second].finish.reason.value == "cancelled"
    assert not owner.app.state.responses.background
    with pytest.raises(openai.NotFoundError):
        owner.client().responses.retrieve(second)


def orphan_record() -> StoredResponse:
    """A background response ``in_progress`` that no replica runs (its replica died)."""
    response_id = "resp_orphan" + str(time.monotonic_ns())
    response = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "model": MODEL,
        "status": "in_progress",
        "background": True,
        "output": [],
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    return StoredResponse(response_id, response)


def check_unconfirmed_cancel(server: Server, response_id: str, wait_s: float) -> None:
    """Cancelling a response nobody runs: a 504 ``cancel_not_confirmed`` after ``wait_s``."""
    import openai

    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as caught:
        server.client().responses.cancel(response_id)
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "cancel_not_confirmed"
    assert "did not confirm the cancel within" in caught.value.message
    assert wait_s <= elapsed < wait_s + 1.5
    assert server.client().responses.retrieve(response_id).status == "in_progress"


class StreamReader(threading.Thread):
    """One streamed POST in a thread: every SSE ``data:`` payload it got, in order."""

    def __init__(self, url: str, body: dict[str, Any], *, started_after: int = 3) -> None:
        super().__init__(daemon=True)
        self.url, self.body, self.started_after = url, body, started_after
        self.data: list[str] = []
        self.status: int | None = None
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        import httpx

        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=90) as answer:
                self.status = answer.status_code
                for line in answer.iter_lines():
                    if line.startswith("data: "):
                        self.data.append(line[6:])
                        if len(self.data) >= self.started_after:
                            self.started.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.started.set()

    def payloads(self) -> list[Any]:
        """Every payload but ``[DONE]``, once the stream ended."""
        self.join(timeout=90)
        assert not self.is_alive(), "the stream never ended"
        assert self.error is None, self.error
        return [json.loads(data) for data in self.data if data != "[DONE]"]


class FakeEngineProcess:
    """``tests/serve/fake_engine.py`` on a loopback port (kill and start it again at will)."""

    SCRIPT = Path(__file__).with_name("fake_engine.py")

    def __init__(self, words: int, pace: float, port: int | None = None, *extra: str) -> None:
        import subprocess
        import sys

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, str(self.SCRIPT), str(self.port), "--words", str(words),
             "--pace", str(pace), *extra],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready", "the fake engine did not start"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
