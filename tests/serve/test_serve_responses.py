"""The Responses API through the official openai client: create, stream, store, background."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseItem, ResponseStreamEvent
from pydantic import TypeAdapter
from serve_support import ENC, LOOKUP_TOOL, MODEL, PARIS, closed_object, post, sse

EVENTS = TypeAdapter(ResponseStreamEvent)
ITEMS = TypeAdapter(ResponseItem)
ANSWER = PARIS
TOOL = LOOKUP_TOOL


def lookup(word: str) -> str:
    return (
        "<|channel|>commentary to=functions.lookup <|constrain|>json"
        f'<|message|>{{"word":"{word}"}}<|call|>'
    )


def test_create_validates_and_is_stored(srv):
    srv.book.add(ANSWER)
    raw = post(srv, "/responses", {"model": MODEL, "input": "Capital of France?"})
    response = Response.model_validate(raw.json())
    assert response.output_text == "Paris."
    assert [item.type for item in response.output] == ["reasoning", "message"]
    client = srv.client()
    again = client.responses.retrieve(response.id)
    assert again.output_text == "Paris." and again.id == response.id
    items = client.responses.input_items.list(response.id)
    assert [item.type for item in items.data] == ["message"]
    for item in items.data:
        ITEMS.validate_python(item.model_dump())
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_stream_events_validate_in_order(srv):
    srv.book.add(ANSWER)
    events = sse(srv, "/responses", {"model": MODEL, "input": "Capital?", "stream": True})
    parsed = [EVENTS.validate_python(e) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert parsed[0].type == "response.created" and parsed[-1].type == "response.completed"
    deltas = "".join(e.delta for e in parsed if e.type == "response.output_text.delta")
    assert deltas == "Paris."
    assert "response.reasoning_text.delta" in {e.type for e in parsed}


def test_function_calls_over_previous_response_id(srv):
    client = srv.client()
    srv.book.add(lookup("harmony"))
    first = client.responses.create(model=MODEL, input="Define harmony", tools=[TOOL])
    (fc,) = [item for item in first.output if item.type == "function_call"]
    assert json.loads(fc.arguments) == {"word": "harmony"}
    srv.book.add(lookup("accord"))
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "agreement"}],
    )
    (fc2,) = [item for item in second.output if item.type == "function_call"]
    srv.book.add("<|channel|>final<|message|>Harmony means agreement.<|return|>")
    with client.responses.stream(
        model=MODEL,
        previous_response_id=second.id,
        tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": fc2.call_id, "output": "concord"}],
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == "Harmony means agreement."
    text = ENC.decode(list(srv.engine.prompts[-1]))
    assert "Define harmony" in text and "agreement" in text and "concord" in text
    # The whole chain is the last response's input.
    kinds = [i.type for i in client.responses.input_items.list(final.id, order="asc").data]
    assert kinds == [
        "message", "function_call", "function_call_output", "function_call",
        "function_call_output",
    ]  # fmt: skip


def test_function_tools_are_strict_unless_they_say_not(srv):
    client = srv.client()
    srv.book.add(lookup("harmony").replace('"word"', '"words"'))
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model=MODEL, input="Define harmony", tools=[TOOL])
    assert caught.value.body["code"] == "engine_error"
    srv.book.add(lookup("harmony").replace('"word"', '"words"'))
    loose = client.responses.create(
        model=MODEL, input="Define harmony", tools=[{**TOOL, "strict": False}]
    )
    (fc,) = [item for item in loose.output if item.type == "function_call"]
    assert json.loads(fc.arguments) == {"words": "harmony"}


def test_item_reference_expands_from_the_chain(srv):
    client = srv.client()
    srv.book.add(ANSWER)
    first = client.responses.create(model=MODEL, input="Capital of France?")
    message_id = next(i for i in first.output if i.type == "message").id
    srv.book.add(ANSWER)
    client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "item_reference", "id": message_id}, {"role": "user", "content": "Sure?"}],
    )
    assert ENC.decode(list(srv.engine.prompts[-1])).count("Paris.") == 2
    with pytest.raises(openai.NotFoundError):
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "item_reference", "id": "msg_nope"}],
        )


def test_unknown_previous_response_is_404(srv):
    with pytest.raises(openai.NotFoundError) as caught:
        srv.client().responses.create(model=MODEL, input="x", previous_response_id="resp_nope")
    assert caught.value.body["param"] == "previous_response_id"


def test_strict_text_format_and_reasoning_effort(srv):
    fmt = {
        "type": "json_schema",
        "name": "answer",
        "strict": True,
        "schema": closed_object(capital={"type": "string"}),
    }
    client = srv.client()
    srv.book.add('<|channel|>final<|message|>{"capital": "Paris"}<|return|>')
    ok = client.responses.create(
        model=MODEL, input="Capital?", text={"format": fmt}, reasoning={"effort": "high"}
    )
    assert json.loads(ok.output_text) == {"capital": "Paris"}
    assert "Reasoning: high" in ENC.decode(list(srv.engine.prompts[-1]))
    srv.book.add("<|channel|>final<|message|>Paris<|return|>")
    events = sse(
        srv, "/responses", {"model": MODEL, "input": "Capital?", "text": {"format": fmt},
                            "stream": True},
    )  # fmt: skip
    assert [e["type"] for e in events][-2:] == ["response.failed", "error"]
    EVENTS.validate_python(events[-2])
    EVENTS.validate_python(events[-1])


def test_builtin_tools_it_cannot_run_are_left_out_and_announced(srv):
    # Codex declares web_search by default: a server without a search backend answers
    # anyway, without telling the model of a tool nobody would run.
    raw = srv.client().responses.with_raw_response.create(
        model=MODEL, input="search", tools=[{"type": "web_search_preview"}]
    )
    assert raw.headers["x-harmonia-omitted-tools"] == "web_search_preview"
    assert raw.parse().output_text == "ok"
    prompt = ENC.decode(list(srv.engine.prompts[-1]))
    assert "browser" not in prompt and "search" in prompt
    # Streaming too (Codex streams), a dated variant too.
    body = {"model": MODEL, "input": "search", "stream": True,
            "tools": [{"type": "web_search_2025_08_26"}, {"type": "code_interpreter"}]}  # fmt: skip
    with httpx.stream("POST", srv.base_url + "/responses", json=body, timeout=20) as response:
        assert response.status_code == 200
        omitted = response.headers["x-harmonia-omitted-tools"]
        assert omitted == "web_search_2025_08_26, code_interpreter"
        assert "response.completed" in response.read().decode()


def test_background_response_completes_and_is_polled(srv):
    client = srv.client()
    srv.book.add(ANSWER, delay=0.01)
    queued = client.responses.create(model=MODEL, input="Capital?", background=True)
    assert queued.status in ("queued", "in_progress")
    deadline = time.monotonic() + 10
    while (current := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert current.status == "completed" and current.output_text == "Paris."


# A long answer, slowly: the response still runs when the test acts on it.
SLOW = ("<|channel|>final<|message|>" + "word " * 200 + "<|return|>", 0.02)


def test_background_response_cancelled(srv):
    client = srv.client()
    srv.book.add(SLOW[0], delay=SLOW[1])
    queued = client.responses.create(model=MODEL, input="Capital?", background=True)
    time.sleep(0.1)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    generation = srv.engine.generations[-1]
    assert generation.done and generation.finish.reason.value == "cancelled"
    assert len(generation.tokens) < 100  # stopped, not run to the end


def test_deleting_a_running_background_response_cancels_it_for_good(srv):
    client = srv.client()
    srv.book.add(SLOW[0], delay=SLOW[1])
    queued = client.responses.create(model=MODEL, input="Capital?", background=True)
    time.sleep(0.1)
    client.responses.delete(queued.id)
    generation = srv.engine.generations[-1]
    assert generation.done and generation.finish.reason.value == "cancelled"
    time.sleep(0.05)  # a run that recorded its end after the delete would show by now
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(queued.id)


def test_background_stream_and_cancel_rules(srv):
    client = srv.client()
    srv.book.add(ANSWER, delay=0.005)
    events = list(client.responses.create(model=MODEL, input="Q", background=True, stream=True))
    assert events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    srv.book.add(ANSWER)
    plain = client.responses.create(model=MODEL, input="Q")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(plain.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input="Q", background=True, store=False)


def test_async_client_responses(srv):
    srv.book.add(ANSWER)

    async def run() -> str:
        async with (
            srv.async_client() as client,
            client.responses.stream(model=MODEL, input="Capital?") as stream,
        ):
            async for _ in stream:
                pass
            return (await stream.get_final_response()).output_text

    assert asyncio.run(run()) == "Paris."


def test_not_stored_when_store_false(srv):
    srv.book.add(ANSWER)
    client = srv.client()
    response = client.responses.create(model=MODEL, input="Q", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_background_response_streams_again_from_a_sequence_number(srv):
    import httpx

    client = srv.client()
    srv.book.add(ANSWER, delay=0.02)
    queued = client.responses.create(model=MODEL, input="Capital?", background=True)
    url = f"{srv.base_url}/responses/{queued.id}?stream=true&starting_after=2"
    with httpx.stream("GET", url, timeout=10) as response:
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"  # a re-stream ends as the stream did
    events = [EVENTS.validate_python(json.loads(text)) for text in data[:-1]]
    assert events[0].sequence_number == 3
    assert [e.sequence_number for e in events] == list(range(3, 3 + len(events)))
    assert events[-1].type == "response.completed"
    # Finished and gone from this server's runs: re-streaming is refused, retrieving works.
    with pytest.raises(openai.BadRequestError):
        client.responses.retrieve(queued.id, stream=True)
    assert client.responses.retrieve(queued.id).output_text == "Paris."


def test_continuing_a_running_response_is_409(srv):
    client = srv.client()
    srv.book.add(SLOW[0], delay=SLOW[1])
    queued = client.responses.create(model=MODEL, input="Q", background=True)
    with pytest.raises(openai.ConflictError) as caught:
        client.responses.create(model=MODEL, input="more", previous_response_id=queued.id)
    assert caught.value.body["param"] == "previous_response_id"
    assert client.responses.cancel(queued.id).status == "cancelled"


def test_request_ids_are_echoed_or_made(srv):
    srv.book.add(ANSWER)
    given = post(
        srv, "/responses", {"model": MODEL, "input": "Q"}, headers={"x-request-id": "abc-1"}
    )
    assert given.headers["x-request-id"] == "abc-1"
    odd = post(
        srv, "/responses", {"model": MODEL, "input": "Q"}, headers={"x-request-id": "a b\\n"}
    )
    assert odd.headers["x-request-id"].startswith("req_")


def test_the_sdk_type_check_refuses_a_wrong_body():
    """The clients' hook (serve_support.check_sdk_types) is a real check."""
    from pydantic import ValidationError
    from serve_support import check_sdk_types

    from harmonia.openai_compat import response_from_tokens

    good = response_from_tokens(ENC, [], model=MODEL, finished=True, ids=1, created_at=1)
    body = json.dumps(good, separators=(",", ":")).encode()
    check_sdk_types("POST", "/v1/responses", 200, "application/json", body)
    with pytest.raises(ValidationError):
        wrong = body.replace(b'"created_at":1', b'"created_at":"yesterday"')
        check_sdk_types("POST", "/v1/responses", 200, "application/json", wrong)
    with pytest.raises(ValidationError):
        event = b'data: {"type": "response.output_text.delta", "sequence_number": 0}\n\n'
        check_sdk_types("POST", "/v1/responses", 200, "text/event-stream", event)
    with pytest.raises(AssertionError):
        check_sdk_types("GET", "/v1/models", 404, "application/json", b'{"detail": "x"}')
