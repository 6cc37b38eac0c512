"""What real clients tripped over (issue 27): each test here failed before the fix.

Large ``max_tokens`` (gpt-oss's evals), refusals OpenAI makes (``messages: []``,
log-probabilities), the demo engine under a strict request, a client that
leaves half-way through its body, the warm-up and the scripted replies, the
date line, built-in and ``namespace`` tools, an engine that cannot start,
and the SDK's stream helper on an incomplete response.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from serve_support import ENC, MODEL, closed_object, free_port, post

from harmonia.engines import EngineSpec, Script, ScriptedEngine

SRC = str(Path(__file__).resolve().parents[2] / "src")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
CALL = (
    '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz":"UTC"}<|call|>'
)
FINAL = "<|channel|>final<|message|>Noon.<|return|>"
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone.",
        "parameters": closed_object(tz={"type": "string"}),
        "strict": True,
    },
}


def _scripted_from(tmp_path: Path, replies: list[str]) -> Any:
    """``harmonia serve --engine scripted --script FILE``'s engine."""
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    return EngineSpec("scripted", script=str(path)).build(ENC)


# -- item 2: max_tokens up to the context --------------------------------------------------


def test_max_tokens_up_to_the_context_is_accepted(make_server):
    server = make_server()
    client = server.client()
    chat = client.chat.completions.create(**CHAT, max_tokens=131_072)
    assert chat.choices[0].finish_reason == "stop" and chat.choices[0].message.content == "ok"
    reply = client.responses.create(model=MODEL, input="Hi", max_output_tokens=131_072)
    assert reply.status == "completed"
    # Past the cap (the context by default) it is still a 400 that says why.
    error = post(server, "/chat/completions", {**CHAT, "max_tokens": 131_073})
    assert error.status_code == 400 and "131072" in error.json()["error"]["message"]


def test_a_generation_stops_where_the_context_runs_out(make_server):
    server = make_server(context_tokens=300)
    endless = ENC.encode("<|channel|>final<|message|>", allowed_special="all")
    word = ENC.encode(" more")
    server.book.add((*endless, *word), repeat=True, chunk_size=16)
    chat = server.client().chat.completions.create(**CHAT, max_tokens=300)
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.prompt_tokens + chat.usage.completion_tokens == 300
    server.book.add((*endless, *word), repeat=True, chunk_size=16)
    reply = server.client().responses.create(model=MODEL, input="Hi", max_output_tokens=300)
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.input_tokens + reply.usage.output_tokens == 300


def test_the_output_cap_is_configurable(make_server):
    server = make_server(max_output_tokens=100)
    assert post(server, "/chat/completions", {**CHAT, "max_tokens": 100}).status_code == 200
    error = post(server, "/chat/completions", {**CHAT, "max_tokens": 101})
    assert error.status_code == 400 and error.json()["error"]["param"] is None


# -- item 4: refusals, the demo engine, half a body -----------------------------------------


def test_empty_messages_is_a_400(srv):
    error = post(srv, "/chat/completions", {"model": MODEL, "messages": []})
    assert error.status_code == 400
    assert error.json()["error"]["param"] == "messages"
    assert error.json()["error"]["code"] == "empty_array"


class _NoLogprobs(ScriptedEngine):
    """An engine that does not say it gives log-probabilities (no ``supports_logprobs``)."""

    supports_logprobs = False


def test_logprobs_the_engine_cannot_give_are_a_400_naming_it(make_server):
    server = make_server(lambda book: _NoLogprobs(book, name="no-logprobs"))
    client = server.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**CHAT, logprobs=True, top_logprobs=2)
    assert "no-logprobs" in caught.value.message and "log-probabilities" in caught.value.message
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="Hi", top_logprobs=3)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="Hi", include=["message.output_text.logprobs"])
    # Saying no is fine.
    assert client.chat.completions.create(**CHAT, logprobs=False).choices[0].message.content


def test_demo_engine_refuses_what_its_reply_cannot_meet_with_a_400(make_server, tmp_path):
    server = make_server(lambda book: EngineSpec("scripted").build(ENC))  # serve --engine scripted
    client = server.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**CHAT, tools=[TIME_TOOL], tool_choice="required")
    assert "scripted" in caught.value.message and caught.value.status_code == 400
    schema = closed_object(a={"type": "string"})
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(**CHAT, response_format=fmt)
    # The refused request did not use up a reply: the next one still gets the demo answer.
    assert "scripted engine" in client.chat.completions.create(**CHAT).choices[0].message.content
    # A reply that meets the constraint is answered.
    fitting = make_server(lambda book: _scripted_from(tmp_path, [CALL])).client()
    chat = fitting.chat.completions.create(**CHAT, tools=[TIME_TOOL], tool_choice="required")
    assert chat.choices[0].message.tool_calls[0].function.name == "get_time"


def _metrics(server: Any) -> str:
    return httpx.get(server.url + "/metrics").text


def test_half_a_body_then_gone_is_a_disconnect_not_a_500(make_server, caplog):
    server = make_server()
    caplog.set_level("INFO", logger="harmonia.serve")
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(head.encode() + b'{"model": "gpt-oss-test", "mess')
    deadline = time.monotonic() + 10
    while 'status="499"' not in (text := _metrics(server)):
        assert time.monotonic() < deadline, text
        time.sleep(0.02)
    assert 'status="500"' not in text
    assert "harmonia_client_disconnects_total 1" in text
    assert "Traceback" not in caplog.text and "internal" not in caplog.text


# -- item 5: the warm-up and the scripted replies -----------------------------------------------


def test_warm_up_does_not_use_up_the_first_scripted_reply(make_server, tmp_path):
    for engine in (_scripted_from(tmp_path, [CALL, FINAL]), ScriptedEngine([CALL_IDS, FINAL_IDS])):
        server = make_server(lambda book, engine=engine: engine, warmup=True)
        client = server.client()
        first = client.chat.completions.create(**CHAT, tools=[TIME_TOOL])
        assert first.choices[0].finish_reason == "tool_calls"
        second = client.chat.completions.create(**CHAT, tools=[TIME_TOOL])
        assert second.choices[0].message.content == "Noon."


CALL_IDS = Script(tuple(ENC.encode(CALL, allowed_special="all")))
FINAL_IDS = Script(tuple(ENC.encode(FINAL, allowed_special="all")))


# -- item 3: the date line ------------------------------------------------------------------


def _prompt(server: Any) -> str:
    return str(ENC.decode(list(server.engine.prompts[-1])))


def test_current_date_is_today_in_utc_by_default(make_server):
    # 01:30 in UTC+2 is still the day before in UTC.
    tz = datetime.timezone(datetime.timedelta(hours=2))
    server = make_server(clock=lambda: datetime.datetime(2026, 3, 5, 1, 30, tzinfo=tz))
    server.client().chat.completions.create(**CHAT)
    assert "Current date: 2026-03-04\n" in _prompt(server)
    server.client().responses.create(model=MODEL, input="Hi")
    assert "Current date: 2026-03-04\n" in _prompt(server)


def test_current_date_fixed_or_left_out(make_server):
    fixed = make_server(current_date="2025-08-05")
    fixed.client().chat.completions.create(**CHAT)
    assert "Current date: 2025-08-05" in _prompt(fixed)
    none = make_server(current_date=None)
    none.client().chat.completions.create(**CHAT)
    assert "Current date" not in _prompt(none)


# -- item 1: built-in tools left out (test_serve_responses), namespace tools ---------------------

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a customer.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        }
    ],
}


def test_namespace_tools_are_harmony_namespaces(srv):
    client = srv.client()
    srv.book.add(
        '<|channel|>commentary to=crm.lookup <|constrain|>json<|message|>{"id":"7"}<|call|>'
    )
    reply = client.responses.create(model=MODEL, input="Who is 7?", tools=[CRM])
    assert "namespace crm {" in ENC.decode(list(srv.engine.prompts[-1]))
    (call,) = reply.output
    assert (call.type, call.name, call.namespace) == ("function_call", "lookup", "crm")
    srv.book.add("<|channel|>final<|message|>Ada.<|return|>")
    answer = client.responses.create(
        model=MODEL,
        previous_response_id=reply.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Ada"}],
        tools=[CRM],
    )
    assert answer.output_text == "Ada."
    assert "to=crm.lookup" in ENC.decode(list(srv.engine.prompts[-1]))


# -- item 8: an engine that cannot start; where responses are kept -----------------------------


def test_an_engine_that_cannot_start_exits_1(tmp_path):
    dead = free_port()  # nothing listens there
    env = {**os.environ, "PYTHONPATH": SRC}
    process = subprocess.run(
        [sys.executable, "-m", "harmonia.serve._cli", "--engine", "vllm", "--url",
         f"http://127.0.0.1:{dead}", "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    output = process.stdout + process.stderr
    assert process.returncode == 1, output
    assert "start-up failed" in output and "Traceback" not in output
    assert "responses are stored in memory" in output
    assert list(tmp_path.iterdir()) == []  # no store file in the folder it was started from


# -- item 7: the SDK's stream helper on an incomplete response -----------------------------------


def test_stream_helper_sees_response_incomplete(srv):
    srv.book.add("<|channel|>final<|message|>" + "word " * 50 + "<|return|>")
    with srv.client().responses.stream(model=MODEL, input="Hi", max_output_tokens=10) as stream:
        events = list(stream)
    # What OpenAI sends for a cut-off response: response.incomplete, not response.completed.
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text.startswith("word word")
