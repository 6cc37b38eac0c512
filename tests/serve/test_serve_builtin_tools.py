"""Built-in tools run on the server: web_search over a local corpus, code_interpreter in the
sandbox, client functions handed back; every object checked against the openai SDK's types."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseItem, ResponseStreamEvent
from pydantic import TypeAdapter
from serve_support import (
    MODEL,
    Book,
    Server,
    closed_object,
    harmony,
    metric,
    request_fuzz,
    start_server,
    with_empty_queue,
)

from harmonia.agent import AgentLimits
from harmonia.serve import AgentToolLoop
from harmonia.tools.browser import LocalCorpusBackend
from harmonia.tools.python import sandbox_status
from tool_examples import responses_weather_tool

EVENTS = TypeAdapter(ResponseStreamEvent)
ITEMS = TypeAdapter(ResponseItem)
SEARCH = [{"type": "web_search_preview"}]
PYTHON = [{"type": "code_interpreter", "container": {"type": "auto"}}]
WEATHER = responses_weather_tool(closed=True)
SEARCH_STEPS = [
    '<|channel|>analysis to=browser.search code<|message|>{"query": "high water"}<|call|>',
    '<|channel|>analysis to=browser.open code<|message|>{"id": 0}<|call|>',
]
ANSWER = "Every 12 hours 25 minutes【1†L2】."
CITED = "【1†L2】"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "tides.md").write_text(
        "# Tides\n\nHigh water comes back every 12 hours and 25 minutes.\n"
        "Low water sits halfway between.\n"
    )
    return folder


@pytest.fixture(scope="module")
def tools_server(corpus: Path, make_engine: Callable[[Book], Any]) -> Iterator[Server]:
    backend = LocalCorpusBackend(corpus)
    server = start_server(make_engine, tool_loop=AgentToolLoop(browser=backend, python=True))
    yield server
    server.stop()
    backend.close()


@pytest.fixture
def ts(tools_server: Server) -> Iterator[Server]:
    yield from with_empty_queue(tools_server)


def script(server: Server, *steps: str) -> None:
    for step in steps:
        server.book.add(step)


def check_stream(events: list[Any]) -> Response:
    """Every event validates; numbers count from 0; the last is the whole response."""
    for event in events:
        EVENTS.validate_python(event.model_dump())
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    response = Response.model_validate(final.model_dump())
    for item in response.output:
        ITEMS.validate_python(item.model_dump())
    return response


def check_citation(response: Response, corpus: Path) -> None:
    message = response.output[-1]
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text" and part.text == ANSWER
    (citation,) = part.annotations
    assert citation.type == "url_citation"
    assert citation.url == (corpus / "tides.md").as_uri() and citation.title == "Tides"
    assert part.text[citation.start_index : citation.end_index] == CITED


def test_web_search_cites_the_page(ts, corpus):
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{ANSWER}<|return|>")
    ttft_before = metric(ts, "harmonia_time_to_first_token_seconds_count")
    tokens_before = metric(ts, "harmonia_generated_tokens_total")
    raw = ts.client().responses.with_raw_response.create(
        model=MODEL, input="When is high water?", tools=SEARCH
    )
    response = Response.model_validate(raw.http_response.json())
    kinds = [item.type for item in response.output]
    assert kinds == ["web_search_call", "web_search_call", "message"]
    search = response.output[0]
    assert search.status == "completed" and search.action.type == "search"
    assert search.action.query == "high water"
    opened = response.output[1].action
    assert opened.type == "open_page" and opened.url == (corpus / "tides.md").as_uri()
    check_citation(response, corpus)
    # The model read the search results before its next step.
    second_prompt = ts.engine.prompts[-2]
    from serve_support import ENC

    assert "High water comes back" in ENC.decode(list(second_prompt))
    # Usage counts the three generations' outputs, and all three prompts.
    assert response.usage.input_tokens > 3 * len(ts.engine.prompts[-3])
    # Stored, and retrievable as it was.
    assert ts.client().responses.retrieve(response.id).output_text == ANSWER
    # The metrics count one first token for the response and every step's tokens.
    assert metric(ts, "harmonia_time_to_first_token_seconds_count") == ttft_before + 1
    generated = metric(ts, "harmonia_generated_tokens_total") - tokens_before
    assert generated == response.usage.output_tokens


def test_web_search_streams_sdk_events(ts, corpus):
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{ANSWER}<|return|>")
    events = list(
        ts.client().responses.create(model=MODEL, input="High water?", tools=SEARCH, stream=True)
    )
    response = check_stream(events)
    check_citation(response, corpus)
    kinds = [e.type for e in events]
    first = kinds.index("response.output_item.added")
    assert kinds[first : first + 5] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    (added,) = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert added.annotation.url == (corpus / "tides.md").as_uri()
    # The annotation comes after the deltas and before the text is done.
    assert kinds.index("response.output_text.delta") < kinds.index(added.type)
    assert kinds.index(added.type) < kinds.index("response.output_text.done")


@pytest.fixture
def sandbox() -> None:
    status = sandbox_status()
    if not status.ok:
        pytest.skip(f"the python sandbox cannot start here: {status.reason}")


def test_code_interpreter_runs_in_the_sandbox(ts, sandbox):
    script(
        ts,
        "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>",
        "<|channel|>final<|message|>It is 42.<|return|>",
    )
    events = list(
        ts.client().responses.create(model=MODEL, input="6*7?", tools=PYTHON, stream=True)
    )
    response = check_stream(events)
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.code == "print(6 * 7)"
    assert call.outputs and "42" in call.outputs[0].logs
    kinds = [e.type for e in events]
    assert "response.code_interpreter_call.interpreting" in kinds
    assert kinds.index("response.code_interpreter_call_code.done") < kinds.index(
        "response.code_interpreter_call.completed"
    )
    assert response.output_text == "It is 42."


def test_function_call_goes_back_to_the_async_client(ts, sandbox):
    """A search, a python run, then a client function: the response ends with the call."""
    script(
        ts,
        SEARCH_STEPS[0],
        "<|channel|>analysis to=python code<|message|>x = 40 + 2\nprint(x)<|call|>",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Brest"}<|call|>',
        "<|channel|>final<|message|>Rain in Brest.<|return|>",
    )
    tools = [*SEARCH, *PYTHON, WEATHER]

    async def main() -> tuple[Response, Response]:
        client = ts.async_client()
        stream = await client.responses.create(
            model=MODEL, input="Weather?", tools=tools, stream=True
        )
        events = [event async for event in stream]
        first = check_stream(events)
        call = first.output[-1]
        assert call.type == "function_call" and call.name == "get_weather"
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "rain"}
        second = await client.responses.create(
            model=MODEL, previous_response_id=first.id, input=[output], tools=tools
        )
        await client.close()
        return first, second

    first, second = asyncio.run(main())
    assert [i.type for i in first.output] == [
        "web_search_call",
        "code_interpreter_call",
        "function_call",
    ]
    assert json.loads(first.output[-1].arguments) == {"city": "Brest"}
    assert first.status == "completed"
    assert Response.model_validate(second.model_dump()).output_text == "Rain in Brest."


HOURS = {
    "type": "json_schema",
    "name": "hours",
    "strict": True,
    "schema": closed_object(hours={"type": "integer"}),
}


def test_every_step_of_the_loop_keeps_the_strict_format(ts):
    """After a tool reply the answer still follows the strict text format."""
    client = ts.client()
    script(ts, SEARCH_STEPS[0], '<|channel|>final<|message|>{"hours": 12}<|return|>')
    ok = client.responses.create(
        model=MODEL, input="High water?", tools=SEARCH, text={"format": HOURS}
    )
    assert json.loads(ok.output_text) == {"hours": 12}
    assert ts.engine.constraints[-1] is not None and ts.engine.constraints[-2] is not None
    # A second step that breaks the schema is refused by the mask, not passed on.
    script(ts, SEARCH_STEPS[0], "<|channel|>final<|message|>About 12 hours.<|return|>")
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(
            model=MODEL, input="High water?", tools=SEARCH, text={"format": HOURS}
        )
    assert caught.value.body["code"] == "engine_error"


def test_every_step_of_the_loop_keeps_strict_functions(ts):
    """Strict arguments hold after a tool reply; tool_choice=required binds only step one."""
    client = ts.client()
    tools = [*SEARCH, WEATHER]  # Responses function tools are strict by default
    script(
        ts,
        SEARCH_STEPS[0],
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"town": "Brest"}<|call|>',
    )
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model=MODEL, input="x", tools=tools, tool_choice="required")
    # The search met "required": the next step may answer.
    script(ts, SEARCH_STEPS[0], "<|channel|>final<|message|>Rain.<|return|>")
    reply = client.responses.create(model=MODEL, input="x", tools=tools, tool_choice="required")
    assert reply.output_text == "Rain."
    first, later = ts.engine.constraints[-2:]
    assert first is not None and later is not None and later.grammar != first.grammar


def test_unavailable_builtin_is_left_out_naming_why(make_server, caplog):
    server = make_server(tool_loop=AgentToolLoop())
    client = server.client()
    caplog.set_level("INFO", logger="harmonia.serve")
    for tools, why in ((SEARCH, "--browser"), (PYTHON, "--python")):
        raw = client.responses.with_raw_response.create(model=MODEL, input="x", tools=tools)
        assert raw.headers["x-harmonia-omitted-tools"] == tools[0]["type"]
        assert raw.parse().status == "completed"
        assert why in caplog.text


# -- a bounded fuzz of requests with built-in tools: never a 5xx ---------------------------

TOOL = st.sampled_from([SEARCH[0], {"type": "web_search"}, PYTHON[0], WEATHER, {"type": "x"}])
ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=8))


@pytest.mark.scripted_only(
    "a request fuzz: what it checks is the server's validation, not the engine, and 150 "
    "examples over the real model would cost seconds for nothing more"
)
@request_fuzz(150)
@given(
    tools=st.lists(TOOL, min_size=1, max_size=3),
    changes=st.dictionaries(
        st.sampled_from(["tool_choice", "max_output_tokens", "stream", "input", "store"]),
        ODD,
        max_size=2,
    ),
)
def test_fuzzed_builtin_tool_requests_never_5xx(tools_server, tools, changes):
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 8, "tools": tools, **changes}
    response = httpx.post(tools_server.base_url + "/responses", json=body, timeout=20)
    assert response.status_code < 500, response.text


class RecordingLoop(AgentToolLoop):
    """Counts the per-response toolboxes closed (the runtimes a response owns)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.closed = 0

    def _toolbox(self, tool_types: Any) -> Any:
        box, browser = super()._toolbox(tool_types)
        close = box.aclose

        async def aclose() -> None:
            self.closed += 1
            await close()

        box.aclose = aclose  # type: ignore[method-assign]
        return box, browser


def test_disconnect_cancels_generation_and_closes_the_tools(corpus, make_server, make_engine):
    backend = LocalCorpusBackend(corpus)
    loop = RecordingLoop(browser=backend)
    server = make_server(make_engine, tool_loop=loop)
    server.book.add(SEARCH_STEPS[0])
    server.book.add("<|channel|>final<|message|>" + "word " * 200 + "<|return|>", delay=0.05)
    body = {"model": MODEL, "input": "Tides?", "tools": SEARCH, "stream": True}
    with httpx.stream("POST", server.base_url + "/responses", json=body) as response:
        for line in response.iter_lines():
            if "response.output_text.delta" in line:
                break  # the search ran; the answer is being written: leave
    generation = server.engine.generations[-1]
    deadline = time.monotonic() + 5
    while not (generation.done and loop.closed):
        assert time.monotonic() < deadline, "the generation or the tools were not stopped"
        time.sleep(0.01)
    assert generation.finish.reason.value == "cancelled"
    assert len(generation.tokens) < 100  # it did not run to the end
    assert loop.closed == 1
    while server.app.state.service.admission.running:
        assert time.monotonic() < deadline, "the admission slot was not given back"
        time.sleep(0.01)
    backend.close()


def test_agent_limits_cut_the_response_short(corpus, make_server, make_engine):
    """max_seconds stops a slow answer; max_steps stops a model that keeps searching."""
    backend = LocalCorpusBackend(corpus)
    limits = AgentLimits(max_seconds=0.5)
    server = make_server(make_engine, tool_loop=AgentToolLoop(browser=backend, limits=limits))
    client = server.client()
    # The pacing is a lower bound on the answer's time (200 tokens, at least 4 s),
    # whatever the machine's load: the limit must cut it short, and the engine
    # must have stopped before the end of the script (a count, not a stopwatch).
    server.book.add("<|channel|>final<|message|>" + "word " * 200 + "<|return|>", delay=0.02)
    slow = client.responses.create(model=MODEL, input="x", tools=SEARCH)
    assert slow.status == "incomplete"
    cut = server.engine.generations[-1]
    assert cut.finish.reason.value == "cancelled" and len(cut.tokens) < 200
    # The step limit on a server without a time limit: however slow the machine,
    # the model's searches are counted, never timed.
    limits = AgentLimits(max_seconds=None, max_steps=2)
    server = make_server(make_engine, tool_loop=AgentToolLoop(browser=backend, limits=limits))
    client = server.client()
    for _ in range(3):
        server.book.add(SEARCH_STEPS[0])
    looping = client.responses.create(model=MODEL, input="x", tools=SEARCH)
    assert looping.status == "incomplete"
    assert [item.type for item in looping.output] == ["web_search_call", "web_search_call"]
    Response.model_validate(looping.model_dump())
    # max_output_tokens bounds the whole response, not each step.
    server.book.add(SEARCH_STEPS[0])
    server.book.add("<|channel|>final<|message|>" + "word " * 50 + "<|return|>")
    budget = len(harmony(SEARCH_STEPS[0])) + 5
    capped = client.responses.create(model=MODEL, input="x", tools=SEARCH, max_output_tokens=budget)
    assert capped.status == "incomplete" and capped.usage.output_tokens == budget
    backend.close()


def test_background_response_runs_the_tools(ts, corpus):
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{ANSWER}<|return|>")
    client = ts.client()
    queued = client.responses.create(
        model=MODEL, input="High water?", tools=SEARCH, background=True
    )
    deadline = time.monotonic() + 10
    response = client.responses.retrieve(queued.id)
    while response.status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, "the background response did not end"
        time.sleep(0.05)
        response = client.responses.retrieve(queued.id)
    check_citation(Response.model_validate(response.model_dump()), corpus)


def test_a_sandbox_that_cannot_start_is_a_400_with_its_reason(monkeypatch):
    import harmonia.tools.python as python_tool
    from harmonia.serve import APIError
    from harmonia.tools.python import SandboxStatus

    broken = SandboxStatus(ok=False, reason="bwrap: no user namespaces")
    monkeypatch.setattr(python_tool, "sandbox_status", lambda config=None: broken)
    loop = AgentToolLoop(python=True)
    with pytest.raises(APIError) as caught:
        loop.check(["code_interpreter"])
    assert caught.value.status == 400 and "bwrap: no user namespaces" in str(caught.value)
    loop.check(["function"])  # nothing built-in: nothing to refuse


def test_logprobs_come_through_the_tool_loop(ts):
    # The loop's generations feed the stream too: the answer after a search has its
    # tokens' log-probabilities, and the search calls (not visible text) have none.
    answer = "High water comes twice a day."
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{answer}<|return|>")
    response = ts.client().responses.create(
        model=MODEL, input="When is high water?", tools=SEARCH, top_logprobs=1
    )
    message = response.output[-1]
    assert message.type == "message" and message.content[0].text == answer
    logprobs = message.content[0].logprobs
    assert "".join(entry.token for entry in logprobs) == answer
    assert all(len(entry.top_logprobs) == 1 for entry in logprobs)
    assert all(g.params.top_logprobs == 1 for g in ts.engine.generations[-3:])


# -- built-in tool choices and include values (issue 33) ------------------------------------


def test_tool_choice_web_search_forces_a_search_and_include_lists_sources(ts, corpus):
    """``tool_choice: {"type": "web_search"}`` is accepted and forces the first step's
    browser call; ``include: ["web_search_call.action.sources"]`` lists the result pages.

    Raw HTTP: the openai SDK's ``ToolChoiceTypes`` knows ``web_search_preview`` but not
    ``web_search``, so the echoed choice is outside its types (the rest is checked)."""
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{ANSWER}<|return|>")
    body = {
        "model": MODEL,
        "input": "When is high water?",
        "tools": [{"type": "web_search"}],
        "tool_choice": {"type": "web_search"},
        "include": ["web_search_call.action.sources"],
    }
    raw = httpx.post(ts.base_url + "/responses", json=body, timeout=20)
    assert raw.status_code == 200, raw.text
    data = raw.json()
    assert data["tool_choice"] == {"type": "web_search"}
    Response.model_validate({**data, "tool_choice": "auto"})
    search, opened = data["output"][0]["action"], data["output"][1]["action"]
    assert search["type"] == "search"
    assert search["sources"] == [{"type": "url", "url": (corpus / "tides.md").as_uri()}]
    assert "sources" not in opened  # only a search has result pages
    # The first step was constrained to a browser search; the later ones were not forced.
    first = ts.engine.constraints[-3]
    assert first is not None and "to=browser.search" in first.grammar
    assert "to=browser.open" not in first.grammar


def test_sources_are_left_out_unless_included(ts, corpus):
    script(ts, *SEARCH_STEPS, f"<|channel|>final<|message|>{ANSWER}<|return|>")
    response = ts.client().responses.create(model=MODEL, input="When is high water?", tools=SEARCH)
    assert response.output[0].action.sources is None


def test_tool_choice_code_interpreter_is_accepted(ts, sandbox):
    script(
        ts,
        "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>",
        "<|channel|>final<|message|>42<|return|>",
    )
    response = ts.client().responses.create(
        model=MODEL, input="6*7?", tools=PYTHON, tool_choice={"type": "code_interpreter"}
    )
    assert [item.type for item in response.output] == ["code_interpreter_call", "message"]
    assert response.tool_choice.type == "code_interpreter"


def test_tool_choice_of_an_undeclared_or_unrunnable_builtin_is_a_clear_400(make_server):
    server = make_server()  # no tool loop: web_search cannot run here
    client = server.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=MODEL,
            input="Q",
            tools=[{"type": "web_search_preview"}],
            tool_choice={"type": "web_search_preview"},
        )
    assert refused.value.body["param"] == "tool_choice"
    assert "cannot run it" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as undeclared:
        client.responses.create(model=MODEL, input="Q", tool_choice={"type": "code_interpreter"})
    assert "do not declare it" in undeclared.value.body["message"]
