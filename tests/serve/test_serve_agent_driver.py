"""The server's turns run through harmonia.agent's driver, with the request's own prompt and
settings: what the built-in tools path used to do differently from a plain request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from serve_support import ENC, LOOKUP_CALL, LOOKUP_LOOSE, MODEL, harmony, metric

from harmonia.agent import AgentLimits
from harmonia.serve import AgentToolLoop
from harmonia.tools.browser import LocalCorpusBackend

SEARCH = [{"type": "web_search_preview"}]
LOOKUP = LOOKUP_LOOSE
CALL = LOOKUP_CALL
THOUGHT = "<|channel|>analysis<|message|>Ponder tides.<|end|><|start|>assistant"
SEARCH_STEP = '<|channel|>analysis to=browser.search code<|message|>{"query": "tides"}<|call|>'
FINAL = "<|channel|>final<|message|>Done.<|return|>"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    (tmp_path / "tides.md").write_text("# Tides\n\nHigh water every 12 hours 25 minutes.\n")
    return tmp_path


def tools_server(make_server: Any, corpus: Path, **config: Any) -> Any:
    return make_server(tool_loop=AgentToolLoop(browser=LocalCorpusBackend(corpus)), **config)


def test_the_tools_path_starts_from_the_spliced_prompt(make_server, corpus):
    server = tools_server(make_server, corpus)
    client = server.client()
    server.book.add(CALL)
    first = client.responses.create(model=MODEL, input="Define x", tools=[*SEARCH, LOOKUP])
    prompt_n, completion_n = (
        list(server.engine.prompts[-1]),
        list(server.engine.generations[-1].tokens),
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    server.book.add(FINAL)
    client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a letter"}],
        tools=[*SEARCH, LOOKUP],
    )
    prompt_next = list(server.engine.prompts[-1])
    # The sampled ids, not a new rendering of them: the engine's prefix cache holds.
    assert prompt_next[: len(prompt_n) + len(completion_n)] == prompt_n + completion_n
    assert "to=functions.lookup<|channel|>" not in ENC.decode(prompt_next)


def test_the_tools_path_renders_under_the_servers_cot_policy(make_server, corpus):
    server = tools_server(make_server, corpus, cot_policy="keep_all")
    client = server.client()
    server.book.add(THOUGHT + FINAL)
    first = client.responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    server.book.add(SEARCH_STEP)
    server.book.add(FINAL)
    again = client.responses.create(
        model=MODEL, previous_response_id=first.id, input="And again?", tools=SEARCH
    )
    assert again.output_text == "Done."
    step_one, step_two = (ENC.decode(list(p)) for p in server.engine.prompts[-2:])
    # keep_all keeps the earlier turn's reasoning in every step's prompt, as a plain
    # request's prompt does (the agent's default policy would drop it).
    assert "Ponder tides." in step_one and "Ponder tides." in step_two
    plain = make_server(cot_policy="keep_all")
    plain.book.add(THOUGHT + FINAL)
    plain_first = plain.client().responses.create(model=MODEL, input="Tides?")
    plain.book.add(FINAL)
    plain.client().responses.create(
        model=MODEL, previous_response_id=plain_first.id, input="And again?"
    )
    assert "Ponder tides." in ENC.decode(list(plain.engine.prompts[-1]))


class Hanging:
    """A search backend whose search never answers; it notes the cancel that ends it."""

    def __init__(self) -> None:
        self.cancelled = 0

    @property
    def source(self) -> str:
        return "hanging"

    async def search(self, query: str, topn: int) -> Any:
        try:
            await asyncio.Event().wait()  # nothing sets it: only a cancel ends the call
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def fetch(self, url: str) -> Any:
        raise AssertionError("not called")

    async def aclose(self) -> None:
        pass


def test_the_wall_time_limit_cancels_a_running_tool(make_server):
    backend = Hanging()
    loop = AgentToolLoop(browser=backend, limits=AgentLimits(max_seconds=0.5))
    server = make_server(tool_loop=loop)
    server.book.add(SEARCH_STEP)
    # Without the cancel the request would wait on the tool until the client gave up.
    client = server.client()  # times out after 20 s
    response = client.responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    assert response.status == "incomplete"
    assert backend.cancelled == 1
    assert server.app.state.service.admission.running == 0


def test_an_engine_failure_after_a_tool_ends_the_response_as_failed(make_server, corpus):
    server = tools_server(make_server, corpus)
    client = server.client()
    server.book.add(SEARCH_STEP)
    server.book.add(FINAL, fail_after=2)
    with pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    assert failed.value.status_code == 502 and failed.value.body["code"] == "engine_error"
    server.book.add(SEARCH_STEP)
    server.book.add(FINAL, fail_after=2)
    events = []
    # The stream's ``error`` event carries the spec's nested ``error``, on which the SDK
    # raises (after yielding ``response.failed``), as for any error in a stream.
    with pytest.raises(openai.APIError, match="the engine failed"):
        for event in client.responses.create(
            model=MODEL, input="Tides?", tools=SEARCH, stream=True
        ):
            events.append(event)
    assert events[-1].type == "response.failed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert server.app.state.service.admission.running == 0


def test_metrics_count_each_generation_once_on_both_paths(make_server, corpus):
    server = tools_server(make_server, corpus)
    client = server.client()
    counts = ("harmonia_time_to_first_token_seconds_count", "harmonia_generated_tokens_total")
    before = [metric(server, name) for name in counts]
    server.book.add(SEARCH_STEP)
    server.book.add(FINAL)
    client.responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    middle = [metric(server, name) for name in counts]
    assert middle[0] - before[0] == 1  # one first token per response
    assert middle[1] - before[1] == len(harmony(SEARCH_STEP)) + len(harmony(FINAL))
    server.book.add(FINAL)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    after = [metric(server, name) for name in counts]
    assert after[0] - middle[0] == 1 and after[1] - middle[1] == len(harmony(FINAL))


def test_importing_the_server_package_loads_no_web_framework() -> None:
    # Turn and the stores are importable without paying for starlette/FastAPI (create_app
    # imports them when it is called), so the routes' shared helpers import them lazily.
    import subprocess
    import sys

    code = "import sys, harmonia.serve; print(sorted({'starlette', 'fastapi'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_tool_step_fits_the_context_window(make_server, corpus):
    probe = tools_server(make_server, corpus)
    probe.book.add(SEARCH_STEP)
    probe.book.add(FINAL)
    probe.client().responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    second = len(probe.engine.prompts[-1])  # the prompt after the search's reply
    # Three ids of room after that prompt: the answer is cut there (incomplete), where a
    # step asked for the whole response's budget would overrun the model's context.
    server = tools_server(make_server, corpus, context_tokens=second + 3)
    server.book.add(SEARCH_STEP)
    server.book.add(FINAL)
    cut = server.client().responses.create(model=MODEL, input="Tides?", tools=SEARCH)
    assert len(server.engine.prompts[-1]) == second
    assert server.engine.generations[-1].params.max_tokens == 3
    assert cut.status == "incomplete"


def test_metrics_show_the_engines_own_counters(make_server):
    # llama.cpp's engine counts the ids it recovered and the end ids it repaired.
    server = make_server()
    server.engine.recovered_ids, server.engine.repaired_ends = 3, 1
    assert metric(server, "harmonia_engine_recovered_ids_total") == 3
    assert metric(server, "harmonia_engine_repaired_ends_total") == 1
    del server.engine.recovered_ids, server.engine.repaired_ends
    assert "harmonia_engine_recovered_ids_total" not in httpx.get(server.url + "/metrics").text
