"""Errors in OpenAI's shape, API keys, admission (429), engine failures, and a request fuzz."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import openai
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from serve_support import MODEL, post, request_fuzz

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


def assert_openai_error(response: httpx.Response, status: int, **expected: Any) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    for key, value in expected.items():
        assert error[key] == value, (key, error)
    return error


def test_malformed_json_is_400(srv):
    response = httpx.post(
        srv.base_url + "/chat/completions",
        content=b'{"model": "x", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert_openai_error(response, 400, type="invalid_request_error", code="invalid_json")
    response = httpx.post(srv.base_url + "/responses", content=b"[1, 2]")
    assert_openai_error(response, 400, code="invalid_json")


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"messages": "hello"}, "messages"),
        ({"stream": "yes"}, "stream"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 9}, "temperature"),
        ({"model": None}, "model"),
        ({"n": 2}, "n"),
    ],
)
def test_wrong_types_are_400_naming_the_field(srv, change, param):
    assert_openai_error(post(srv, "/chat/completions", {**CHAT, **change}), 400, param=param)


def test_conversion_errors_name_the_json_path(srv):
    body = {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    error = assert_openai_error(post(srv, "/chat/completions", body), 400)
    assert error["param"].startswith("messages[0]")
    missing = {"model": MODEL}
    assert_openai_error(post(srv, "/responses", {**missing, "input": 5}), 400, param="input")


def test_huge_body_is_413(make_server):
    server = make_server(max_body_bytes=10_000)
    body = {**CHAT, "messages": [{"role": "user", "content": "a" * 20_000}]}
    assert_openai_error(post(server, "/chat/completions", body), 413, code="request_too_large")


def test_too_many_input_tokens_is_400(make_server):
    server = make_server(max_input_tokens=100)
    body = {**CHAT, "messages": [{"role": "user", "content": "word " * 500}]}
    error = assert_openai_error(post(server, "/chat/completions", body), 400)
    assert error["code"] == "context_length_exceeded"


def test_unknown_ids_routes_and_models_are_404(srv):
    for method, path in [
        ("GET", "/responses/resp_nope"),
        ("DELETE", "/responses/resp_nope"),
        ("POST", "/responses/resp_nope/cancel"),
        ("GET", "/responses/resp_nope/input_items"),
        ("GET", "/nowhere"),
        ("GET", "/models/gpt-5"),
    ]:
        assert_openai_error(httpx.request(method, srv.base_url + path), 404)
    error = assert_openai_error(post(srv, "/chat/completions", {**CHAT, "model": "gpt-5"}), 404)
    assert error["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        srv.client().responses.retrieve("resp_nope")
    models = srv.client().models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_api_keys(make_server, caplog):
    caplog.set_level(logging.DEBUG)
    server = make_server(api_keys=("sk-good-key-123",))
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="sk-wrong-key-456").chat.completions.create(**CHAT)
    response = httpx.get(server.base_url + "/models")
    assert_openai_error(response, 401, code="invalid_api_key")
    reply = server.client(api_key="sk-good-key-123").chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "ok"
    assert httpx.get(server.url + "/health").status_code == 200
    assert "sk-good-key-123" not in caplog.text and "sk-wrong-key-456" not in caplog.text
    assert "sk-good-key-123" not in repr(server.app.state.service.config)


def test_admission_429_with_retry_after(make_server):
    server = make_server(max_concurrent=1, queue_size=0, retry_after_s=3)
    server.book.add("<|channel|>final<|message|>slow answer<|return|>", stall_after=2)
    with httpx.stream(
        "POST", server.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=10
    ) as first:
        lines = first.iter_lines()  # keep it: dropping the iterator closes the stream
        next(lines)  # the first request holds the only slot
        second = post(server, "/chat/completions", CHAT)
        assert_openai_error(second, 429, type="rate_limit_error")
        assert second.headers["retry-after"] == "3"
        with pytest.raises(openai.RateLimitError):
            server.client().responses.create(model=MODEL, input="x")
    # The slot comes back once the first client leaves.
    for _ in range(200):
        if server.app.state.service.admission.running == 0:
            break
        threading.Event().wait(0.01)
    assert post(server, "/chat/completions", CHAT).status_code == 200


@pytest.mark.scripted_only("an engine failure on cue (fail_after) after the stream started")
def test_engine_failure_mid_stream_reaches_the_sdk(srv):
    srv.book.add("<|channel|>final<|message|>Hello there my friend<|return|>", fail_after=3)
    client = srv.client()
    with pytest.raises(openai.APIError) as caught:
        for _ in client.chat.completions.create(**CHAT, stream=True):
            pass
    assert "engine failed" in str(caught.value.message)
    srv.book.add("<|channel|>final<|message|>Hello there my friend<|return|>", fail_after=3)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**CHAT)


def test_malformed_model_output_is_an_honest_answer(srv):
    # A model that forgets <|end|> and writes a stray special token: lenient parse, 200.
    srv.book.add("<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final"
                 "<|message|>Fine<|constrain|> answer<|return|>")  # fmt: skip
    reply = srv.client().chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "Fine answer"


# -- a bounded fuzz: no request, however odd, gets a 5xx ---------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["model", "messages", "input", "stream", "max_tokens", "max_output_tokens", "tools",
     "tool_choice", "response_format", "text", "temperature", "top_p", "reasoning",
     "previous_response_id", "instructions", "store", "background", "n", "seed",
     "parallel_tool_calls", "stream_options", "reasoning_effort"]
)  # fmt: skip


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=20) as client:
        yield client


VALID = {
    "/chat/completions": {**CHAT, "max_tokens": 4},
    "/responses": {"model": MODEL, "input": "Hi", "max_output_tokens": 4},
}


@pytest.mark.scripted_only(
    "a request fuzz: it checks the server's validation, not the engine; 1,000 examples over "
    "the real model would add a minute for nothing more"
)
# 1,000 examples: the bar; about 8 s over one keep-alive connection
@request_fuzz(1000)
@given(
    path=st.sampled_from(sorted(VALID)),
    changes=st.dictionaries(FIELDS, JSON, max_size=3),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_fuzzed_requests_never_5xx(srv, http, path, changes, raw):
    if raw is not None:
        response = http.post(srv.base_url + path, content=raw)
    else:
        body = {**VALID[path], **changes}
        body.pop("background", None)  # background runs outlive the request
        response = http.post(srv.base_url + path, json=body)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert_openai_error(response, response.status_code)
    elif response.headers["content-type"].startswith("application/json"):
        json.loads(response.text)


# -- requests generated from the SDK's own request types -------------------------------------


def _json_ready(value: Any) -> Any:
    """A drawn SDK params value as JSON: iterables become lists, anything else a string."""
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [_json_ready(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


SDK_BODIES = st.one_of(
    st.tuples(st.just("/chat/completions"), st.from_type(CompletionCreateParamsNonStreaming)),
    st.tuples(st.just("/responses"), st.from_type(ResponseCreateParamsNonStreaming)),
)


# The strategies' reprs (the whole TypedDict trees) are tens of kB; hypothesis warns.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.scripted_only(
    "a request fuzz: it checks the server's validation, not the engine; 300 examples over "
    "the real model would cost seconds for nothing more"
)
@request_fuzz(300)
@given(drawn=SDK_BODIES)
def test_requests_drawn_from_the_sdk_types_never_5xx(srv, http, drawn):
    """Bodies drawn from the SDK's request TypedDicts (generated from OpenAI's OpenAPI spec).

    Unlike the fuzz above (any JSON in any field), these have the API's shapes:
    the nested messages, items, tools and formats a client really sends.
    """
    path, params = drawn
    body = _json_ready(params)
    body["model"] = MODEL  # a drawn model name would stop every request at a 404
    body.pop("background", None)  # background runs outlive the request
    try:
        raw = json.dumps(body, allow_nan=False)
    except ValueError:  # NaN/infinity: not JSON, covered by the malformed-body tests
        assume(False)
    response = http.post(
        srv.base_url + path, content=raw, headers={"content-type": "application/json"}
    )
    if response.status_code >= 500:
        error = assert_openai_error(response, response.status_code)
        # The one 5xx by design: the scripted engine's fixed reply breaking a constraint
        # the request asked for (tool_choice="required", say) is the engine failing; a
        # real model samples under the mask and cannot.
        assert error["code"] == "engine_error" and "breaks the constraint" in error["message"]
    elif response.status_code >= 400:
        assert_openai_error(response, response.status_code)


def test_hostile_inputs_never_fail_or_stall_the_loop(make_server):
    # Inputs that make some BPE encoders quadratic or crash them (serving.md §4d): the
    # server answers 200 or 400, and other requests are answered meanwhile.
    server = make_server(max_input_tokens=300_000)
    for text in ("a" * 1_000_000, " " * 1_000_000, "a" * 200_000):
        body = {**CHAT, "messages": [{"role": "user", "content": text}], "max_tokens": 2}
        result: list[httpx.Response] = []

        def send(body: dict[str, Any] = body, result: list[httpx.Response] = result) -> None:
            result.append(post(server, "/chat/completions", body))

        worker = threading.Thread(target=send)
        worker.start()
        while worker.is_alive():
            started = time.monotonic()
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            assert time.monotonic() - started < 0.5
            worker.join(timeout=0.05)
        assert result[0].status_code in (200, 400), result[0].text


def test_cors_is_off_by_default_and_opt_in(srv, make_server):
    origin = {"Origin": "https://app.example"}
    assert (
        "access-control-allow-origin"
        not in httpx.get(srv.base_url + "/models", headers=origin).headers
    )
    server = make_server(cors_origins=("https://app.example",))
    preflight = httpx.options(
        server.base_url + "/chat/completions",
        headers={**origin, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"


def test_a_strict_schema_the_grammar_cannot_compile_is_400(srv):
    schema = {"type": "string", "pattern": "(?=a)b"}  # look-ahead: no regular grammar has it
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}
    error = assert_openai_error(
        post(srv, "/chat/completions", {**CHAT, "response_format": fmt}), 400
    )
    assert "look-around" in error["message"]
