"""The objects and events of the Responses API to the letter of the OpenResponses spec.

Every body and SSE payload the test clients receive is already validated by
``serve_support.check_sdk_types`` (the openai SDK's types, the spec's published
types from ``openresponses-types``, and the keys OpenAI's schema requires of a
Chat completion); these tests validate directly and strictly, and show that the
checks fail when a required key is missing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from serve_support import (
    CHAT_REQUIRED,
    LOOKUP_TOOL,
    MODEL,
    PARIS,
    check_chat_keys,
    check_spec_event,
    check_spec_response,
    closed_object,
    post,
    sse,
)

spec = pytest.importorskip(
    "openresponses_types",
    reason="openresponses-types (the OpenResponses spec's types) is not installed "
    "(pip install -e '.[clients]')",
)

ANSWER = PARIS
TOOL = LOOKUP_TOOL
CALL = (
    "<|channel|>commentary to=functions.lookup <|constrain|>json"
    '<|message|>{"word":"accord"}<|call|>'
)


def test_the_types_are_the_2026_04_24_spec_or_later() -> None:
    assert spec.__spec_version__ >= "2026-04-24", spec.__spec_version__


def test_a_response_has_every_key_of_the_spec(srv: Any) -> None:
    srv.book.add(ANSWER)
    body = {"model": MODEL, "input": "Capital?", "reasoning": {"effort": "low"}}
    data = post(srv, "/responses", body).json()
    spec.ResponseResource.model_validate(data)
    required = {name for name, f in spec.ResponseResource.model_fields.items() if f.is_required()}
    assert required <= set(data), sorted(required - set(data))
    # Unset fields are null, not absent; used defaults are reported.
    assert data["previous_response_id"] is None and data["max_tool_calls"] is None
    assert data["reasoning"] == {"effort": "low", "summary": None}
    assert data["text"] == {"format": {"type": "text"}}
    assert (data["temperature"], data["top_p"], data["truncation"]) == (1.0, 1.0, "disabled")
    assert data["completed_at"] >= data["created_at"]


@pytest.mark.parametrize("key", ["usage", "completed_at", "temperature", "text", "tools"])
def test_a_missing_required_key_fails_the_checks(srv: Any, key: str) -> None:
    srv.book.add(ANSWER)
    data = post(srv, "/responses", {"model": MODEL, "input": "Capital?"}).json()
    check_spec_response(data)  # whole: it passes
    broken = {k: v for k, v in data.items() if k != key}
    with pytest.raises(ValidationError):
        check_spec_response(broken)


def test_function_tools_are_echoed_with_all_four_fields(srv: Any) -> None:
    srv.book.add(CALL)
    bare = {"type": "function", "name": "now"}  # no description, parameters or strict
    loose = {**TOOL, "name": "other", "strict": False}
    body = {"model": MODEL, "input": "Define accord", "tools": [TOOL, bare, loose]}
    data = post(srv, "/responses", body).json()
    check_spec_response(data)
    echoed = {tool["name"]: tool for tool in data["tools"]}
    assert echoed["lookup"] == {**TOOL, "strict": True}  # strict unless told otherwise
    assert echoed["now"] == {
        "type": "function",
        "name": "now",
        "description": None,
        "parameters": None,
        "strict": True,
    }
    assert echoed["other"]["strict"] is False


def test_a_strict_json_schema_format_is_echoed_whole(srv: Any) -> None:
    srv.book.add('<|channel|>final <|constrain|>json<|message|>{"city":"Paris"}<|return|>')
    schema = closed_object(city={"type": "string"})
    fmt = {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    body = {"model": MODEL, "input": "Where?", "text": {"format": fmt}}
    data = post(srv, "/responses", body).json()
    check_spec_response(data)
    assert data["text"]["format"] == {**fmt, "description": None}


def test_every_streamed_event_validates_and_the_stream_ends_with_done(srv: Any) -> None:
    srv.book.add(CALL)
    body = {"model": MODEL, "input": "Define accord", "tools": [TOOL], "stream": True}
    events = sse(srv, "/responses", body)  # asserts the trailing [DONE] and drops it
    for event in events:
        check_spec_event(event)
    created, in_progress = events[0]["response"], events[1]["response"]
    # The in-progress response has every key too, usage (null) included.
    for snapshot in (created, in_progress):
        spec.ResponseResource.model_validate(snapshot)
        assert "usage" in snapshot and snapshot["usage"] is None
        assert snapshot["completed_at"] is None
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["usage"]["total_tokens"] > 0
    broken = copy.deepcopy(events[0])
    del broken["response"]["usage"]
    with pytest.raises(ValidationError):
        check_spec_event(broken)


def test_a_cut_off_stream_validates(srv: Any) -> None:
    srv.book.add("<|channel|>final<|message|>" + "word " * 40 + "<|return|>")
    body = {"model": MODEL, "input": "Talk", "max_output_tokens": 5, "stream": True}
    events = sse(srv, "/responses", body)
    for event in events:
        check_spec_event(event)
    assert events[-1]["type"] == "response.incomplete"


@pytest.mark.scripted_only("an engine failure on cue")
def test_an_engine_failure_mid_stream_validates(srv: Any) -> None:
    srv.book.add("<|channel|>final<|message|>" + "word " * 20 + "<|return|>", fail_after=4)
    events = sse(srv, "/responses", {"model": MODEL, "input": "Talk", "stream": True})
    assert [e["type"] for e in events[-2:]] == ["response.failed", "error"]
    for event in events:
        check_spec_event(event)
    error = events[-1]
    # OpenAI's shape (top-level fields, the openai SDK reads them) and the spec's (nested).
    assert error["code"] == error["error"]["code"] == "server_error"
    assert error["message"] == error["error"]["message"]


def test_chat_completions_have_every_key_openai_requires(srv: Any) -> None:
    srv.book.add(CALL)
    tool = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Q"}], "tools": [tool]}
    data = post(srv, "/chat/completions", body).json()
    check_chat_keys(data, chunk=False)
    message = data["choices"][0]["message"]
    assert message["refusal"] is None and message["tool_calls"]
    for where, key in [
        ((), "created"),
        (("choices", 0), "logprobs"),
        (("choices", 0, "message"), "refusal"),
    ]:
        broken = copy.deepcopy(data)
        target = broken
        for step in where:
            target = target[step]
        del target[key]
        with pytest.raises(AssertionError):
            check_chat_keys(broken, chunk=False)
    assert CHAT_REQUIRED["message"] == {"content", "refusal", "role"}


def test_chat_chunks_have_every_key_openai_requires(srv: Any) -> None:
    srv.book.add(ANSWER)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Q"}], "stream": True}
    chunks = [c for c in sse(srv, "/chat/completions", body) if c != "[DONE]"]
    for chunk in chunks:
        check_chat_keys(chunk, chunk=True)
    broken = copy.deepcopy(chunks[0])
    del broken["choices"][0]["finish_reason"]
    with pytest.raises(AssertionError):
        check_chat_keys(broken, chunk=True)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_image", "image_url": "https://example.org/cat.png", "detail": "auto"},
        {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,"},
    ],
)
def test_images_and_files_are_a_clear_400(srv: Any, part: dict[str, Any]) -> None:
    content = [{"type": "input_text", "text": "What is this?"}, part]
    body = {"model": MODEL, "input": [{"role": "user", "content": content}]}
    answer = post(srv, "/responses", body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "input[0].content[1]" and error["code"] == "invalid_value"
    assert part["type"] in error["message"] and "text only" in error["message"]
