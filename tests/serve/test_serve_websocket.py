"""WebSocket mode of /v1/responses, with a real WebSocket client on 127.0.0.1.

Each event frame is validated like an SSE payload (the openai SDK's types and,
where installed, the OpenResponses spec's own).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from serve_support import ENC, MODEL, check_spec_event

websockets = pytest.importorskip(
    "websockets", reason="websockets (uvicorn[standard], the serve extra) is not installed"
)
from websockets.exceptions import InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

EVENTS = TypeAdapter(ResponseStreamEvent)
ANSWER = (
    "<|channel|>analysis<|message|>Simple.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
)
LONG = "<|channel|>final<|message|>" + "word " * 200 + "<|return|>"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def ws_url(server: Any) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


def create(socket: Any, **body: Any) -> list[dict[str, Any]]:
    """Send one ``response.create``; every frame until its response ends (or an error)."""
    socket.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(socket.recv(timeout=20))
        frames.append(frame)
        if frame["type"] == "error" and "status" in frame:  # in band, request-level
            return frames
        EVENTS.validate_python(frame)
        check_spec_event(frame)
        if frame["type"] in TERMINAL:
            return frames


def metric(server: Any, name: str) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_sequential_requests_and_a_continuation_without_the_store(srv: Any) -> None:
    srv.book.add(ANSWER)
    srv.book.add("<|channel|>final<|message|>Lyon.<|return|>")
    with connect(ws_url(srv)) as socket:
        first = create(socket, input="Capital of France?", store=False)
        assert [f["sequence_number"] for f in first] == list(range(len(first)))
        assert first[0]["type"] == "response.created"
        assert first[-1]["type"] == "response.completed"
        done = first[-1]["response"]
        assert done["output"][-1]["content"][0]["text"] == "Paris."
        # Not stored: over HTTP it does not exist; on this connection it continues.
        assert httpx.get(f"{srv.base_url}/responses/{done['id']}").status_code == 404
        second = create(socket, input="And second city?", previous_response_id=done["id"])
        assert second[-1]["type"] == "response.completed"
        assert second[-1]["response"]["previous_response_id"] == done["id"]
    # The second prompt holds the first turn (what the model answered then).
    prompt = ENC.decode(list(srv.engine.prompts[-1]))
    assert "Capital of France?" in prompt and "Paris." in prompt and "second city" in prompt


def test_request_failures_are_in_band_and_a_failed_continuation_forgets(srv: Any) -> None:
    spec = pytest.importorskip("openresponses_types", reason="openresponses-types is not installed")
    srv.book.add(ANSWER)
    with connect(ws_url(srv)) as socket:
        (missing,) = create(socket, input="Q", previous_response_id="resp_nope")
        spec.WebSocketErrorEvent.model_validate(missing)
        assert missing["status"] == 404
        assert missing["error"]["code"] == "previous_response_not_found"
        first = create(socket, input="Capital?", store=False)[-1]["response"]
        (wrong,) = create(
            socket, model="no-such-model", input="Q", previous_response_id=first["id"]
        )
        assert wrong["status"] == 404 and wrong["error"]["code"] == "model_not_found"
        # The failed continuation evicted the connection's cache: the id is gone.
        (gone,) = create(socket, input="Q", previous_response_id=first["id"])
        assert gone["error"]["code"] == "previous_response_not_found"
        (http_only,) = create(socket, input="Q", background=True)
        assert http_only["status"] == 400 and http_only["error"]["param"] == "background"
        (not_streamed,) = create(socket, input="Q", stream=False)
        assert not_streamed["error"]["param"] == "stream"
        socket.send("not json")
        assert json.loads(socket.recv(timeout=20))["error"]["code"] == "invalid_json"
        # The connection still serves.
        srv.book.add(ANSWER)
        assert create(socket, input="Again")[-1]["type"] == "response.completed"


def test_generate_false_prewarms_without_sampling(srv: Any) -> None:
    srv.book.add("<|channel|>final<|message|>Warm.<|return|>")
    with connect(ws_url(srv)) as socket:
        before = len(srv.engine.prompts)
        warm = create(socket, input="Hi", generate=False)
        assert [f["type"] for f in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1]["response"]["output"] == []
        assert len(srv.engine.prompts) == before  # nothing was sampled
        answer = create(socket, input="Hello?", previous_response_id=warm[-1]["response"]["id"])
        assert answer[-1]["response"]["output"][-1]["content"][0]["text"] == "Warm."
    # The continuation starts from the prewarmed request's input.
    assert "user<|message|>Hi<|end|><|start|>user<|message|>Hello?" in ENC.decode(
        list(srv.engine.prompts[-1])
    )


def test_the_upgrade_is_401_for_a_bad_key_and_426_when_off(make_server: Any) -> None:
    keyed = make_server(api_keys=("sk-right",))
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(keyed), additional_headers={"Authorization": "Bearer sk-wrong"})
    assert refused.value.response.status_code == 401
    keyed.book.add(ANSWER)
    with connect(ws_url(keyed), additional_headers={"Authorization": "Bearer sk-right"}) as ok:
        assert create(ok, input="Q")[-1]["type"] == "response.completed"
    off = make_server(websocket=False)
    with pytest.raises(InvalidStatus) as off_answer:
        connect(ws_url(off))
    assert off_answer.value.response.status_code == 426
    # An upgrade the ASGI server did not take arrives as a plain GET: 426 as well.
    plain = httpx.get(off.base_url + "/responses", headers={"Upgrade": "websocket"})
    assert plain.status_code == 426 and plain.json()["error"]["code"] == "websocket_unavailable"


def test_another_tenants_response_is_not_found_over_the_socket(make_server: Any) -> None:
    server = make_server(api_keys=("sk-a", "sk-b"))
    server.book.add(ANSWER)
    mine = httpx.post(
        server.base_url + "/responses",
        json={"model": MODEL, "input": "Q"},
        headers={"Authorization": "Bearer sk-a"},
    ).json()
    with connect(ws_url(server), additional_headers={"Authorization": "Bearer sk-b"}) as theirs:
        (error,) = create(theirs, input="Q", previous_response_id=mine["id"])
    assert error["status"] == 404 and error["error"]["code"] == "previous_response_not_found"


@pytest.mark.scripted_only("the engine's generations are inspected (the scripted one's)")
def test_closing_the_socket_cancels_the_generation_and_counts(srv: Any) -> None:
    srv.book.add(LONG, delay=0.05)
    disconnects = metric(srv, "harmonia_client_disconnects_total")
    with connect(ws_url(srv)) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Talk"}))
        while json.loads(socket.recv(timeout=20))["type"] != "response.output_text.delta":
            pass
        generation = srv.engine.generations[-1]
    deadline = time.monotonic() + 10
    while not generation.done:
        assert time.monotonic() < deadline, "the generation was not stopped"
        time.sleep(0.005)
    assert generation.finish.reason.value == "cancelled"
    while srv.app.state.service.admission.running:
        assert time.monotonic() < deadline, "the slot was not given back"
        time.sleep(0.005)
    assert metric(srv, "harmonia_client_disconnects_total") == disconnects + 1


def test_each_request_on_the_socket_is_counted_on_the_route(srv: Any) -> None:
    name = 'harmonia_requests_total{path="/v1/responses",status="200"}'
    before = metric(srv, name)
    srv.book.add(ANSWER)
    srv.book.add(ANSWER)
    with connect(ws_url(srv)) as socket:
        create(socket, input="One")
        create(socket, input="Two")
    assert metric(srv, name) == before + 2
