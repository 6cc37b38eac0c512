"""Third-party clients, configured as docs/serve.md's "Clients" section says, end to end.

Each one runs against a real server over the scripted engine: the model
calls a tool, the client runs it and sends its result, the model answers. The
prompt of the answering turn must hold the tool's output (the client really
ran it and sent it back). A client that is not installed skips, saying which
(``pip install -e '.[clients]'``; Codex: ``npm i -g @openai/codex``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from serve_support import ENC, MODEL

# LiteLLM fetches a price list from the network when imported: use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

WEATHER_CALL = (
    "<|channel|>analysis<|message|>Look it up.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)
ANSWER = (
    "<|channel|>analysis<|message|>The tool said it.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Sunny, 21 C in Paris.<|return|>"
)
CITY_JSON = (
    "<|channel|>analysis<|message|>Fill the schema.<|end|>"
    '<|start|>assistant<|channel|>final<|message|>{"name":"Paris","country":"France"}<|return|>'
)


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny, 21 C in {city} (tool output)"


def _last_prompt(server: Any) -> str:
    return str(ENC.decode(list(server.engine.prompts[-1])))


def _round_trip(server: Any) -> None:
    """The model called get_weather, then answered with the tool's output in its prompt."""
    assert len(server.engine.prompts) >= 2
    assert "to=functions.get_weather" in _last_prompt(server)
    assert "Sunny, 21 C in Paris (tool output)" in _last_prompt(server)


# -- the OpenAI Agents SDK ------------------------------------------------------------------


def _agents() -> Any:
    agents = pytest.importorskip(
        "agents", reason="openai-agents is not installed (pip install -e '.[clients]')"
    )
    agents.set_tracing_disabled(True)  # nothing leaves the machine
    return agents


def _agent_model(agents: Any, server: Any, api: str) -> Any:
    import openai

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    if api == "chat":
        return agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    return agents.OpenAIResponsesModel(model=MODEL, openai_client=client)


def _weather_agent(agents: Any, server: Any, api: str) -> Any:
    """An agent with the weather tool, and the server scripted to call it, then answer."""
    server.book.add(WEATHER_CALL)
    server.book.add(ANSWER)
    return agents.Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[agents.function_tool(get_weather)],
        model=_agent_model(agents, server, api),
    )


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_sdk_function_tool(make_server, api):
    agents = _agents()
    server = make_server()
    agent = _weather_agent(agents, server, api)
    result = asyncio.run(agents.Runner.run(agent, "Weather in Paris?"))
    assert result.final_output == "Sunny, 21 C in Paris."
    _round_trip(server)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_sdk_streaming(make_server, api):
    agents = _agents()
    server = make_server()
    agent = _weather_agent(agents, server, api)

    async def run() -> tuple[Any, list[str]]:
        result = agents.Runner.run_streamed(agent, "Weather in Paris?")
        kinds = [event.type async for event in result.stream_events()]
        return result, kinds

    result, kinds = asyncio.run(run())
    assert result.final_output == "Sunny, 21 C in Paris."
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    _round_trip(server)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_sdk_structured_output_type(make_server, api):
    agents = _agents()
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    server = make_server()
    server.book.add(CITY_JSON)
    agent = agents.Agent(
        name="cities", instructions="Name a city.", output_type=City,
        model=_agent_model(agents, server, api),
    )  # fmt: skip
    result = asyncio.run(agents.Runner.run(agent, "Capital of France?"))
    assert result.final_output == City(name="Paris", country="France")
    # A strict schema: the server enforced it while sampling (the scripted engine checks).
    assert server.engine.constraints[-1] is not None


# -- LangChain ------------------------------------------------------------------------------


def _chat_openai(server: Any, responses: bool) -> Any:
    langchain_openai = pytest.importorskip(
        "langchain_openai",
        reason="langchain-openai is not installed (pip install -e '.[clients]')",
    )
    return langchain_openai.ChatOpenAI(
        model=MODEL,
        base_url=server.base_url,
        api_key="unused",
        use_responses_api=responses,
        max_retries=0,
    )


@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
def test_langchain_bind_tools(make_server, responses):
    server = make_server()
    llm = _chat_openai(server, responses)
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    weather = tool(get_weather)
    server.book.add(WEATHER_CALL)
    server.book.add(ANSWER)
    bound = llm.bind_tools([weather])
    history: list[Any] = [HumanMessage("Weather in Paris?")]
    called = bound.invoke(history)
    (call,) = called.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    history += [called, ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"])]
    answer = bound.invoke(history)
    assert answer.text == "Sunny, 21 C in Paris."
    _round_trip(server)


@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
def test_langchain_with_structured_output(make_server, responses):
    server = make_server()
    llm = _chat_openai(server, responses)
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    server.book.add(CITY_JSON)
    city = llm.with_structured_output(City).invoke("Capital of France?")
    assert city == City(name="Paris", country="France")


# -- LiteLLM --------------------------------------------------------------------------------


def test_litellm_tool_round_trip(make_server):
    litellm = pytest.importorskip(
        "litellm", reason="litellm is not installed (pip install -e '.[clients]')"
    )
    server = make_server()
    server.book.add(WEATHER_CALL)
    server.book.add(ANSWER)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    common = {"model": f"openai/{MODEL}", "api_base": server.base_url, "api_key": "unused"}
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    called = litellm.completion(messages=messages, tools=tools, **common)
    message = called.choices[0].message
    (call,) = message.tool_calls
    assert call.function.name == "get_weather"
    messages += [
        message.model_dump(exclude_none=True),
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": get_weather(**json.loads(call.function.arguments)),
        },
    ]
    answer = litellm.completion(messages=messages, tools=tools, **common)
    assert answer.choices[0].message.content == "Sunny, 21 C in Paris."
    _round_trip(server)


# -- gpt-oss's eval samplers ------------------------------------------------------------------
# The gpt-oss package needs Python >= 3.12 (and its eval extras), so its samplers'
# requests are reproduced here field for field, with their defaults: `python -m
# gpt_oss.evals` builds every sampler with max_tokens=131_072, temperature 1.0 and
# reasoning effort low/medium/high; a 400 there becomes an empty answer scored 0.


@pytest.mark.parametrize("sampler", ["responses", "chat_completions"])
def test_gpt_oss_eval_samplers_defaults(make_server, sampler):
    server = make_server()
    server.book.add("<|channel|>analysis<|message|>2+2.<|end|>"
                    "<|start|>assistant<|channel|>final<|message|>Answer: 4<|return|>")  # fmt: skip
    client = server.client()  # (the samplers: OpenAI(base_url=..., timeout=24 h))
    messages = [{"role": "user", "content": "What is 2+2? End with 'Answer: N'."}]
    if sampler == "responses":
        response = client.responses.create(
            model=MODEL,
            input=messages,
            temperature=1.0,
            max_output_tokens=131_072,
            reasoning={"effort": "low"},
        )
        text = response.output_text
    else:
        completion = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            reasoning_effort="low",
            temperature=1.0,
            max_tokens=131_072,
        )
        text = completion.choices[0].message.content
    assert text == "Answer: 4"
    assert "Reasoning: low" in _last_prompt(server)


# -- Codex CLI --------------------------------------------------------------------------------

CODEX_CALL = (
    "<|channel|>analysis<|message|>Run it.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.exec_command <|constrain|>json"
    '<|message|>{"cmd":"echo harmonia-$((6*7))"}<|call|>'
)
CODEX_ANSWER = "<|channel|>final<|message|>The shell printed harmonia-42.<|return|>"


def test_reasoning_summary_stays_empty_and_the_reasoning_is_its_content(make_server):
    # gpt-oss has no summariser and its raw reasoning is not meant for end users: like
    # gpt-oss's reference server, a summary asked for stays empty; the reasoning is the
    # item's reasoning_text content, which clients that show it read (docs/serve.md).
    server = make_server()
    server.book.add(ANSWER)
    reply = server.client().responses.create(
        model=MODEL, input="Weather?", reasoning={"effort": "low", "summary": "auto"}
    )
    reasoning = reply.output[0]
    assert reasoning.type == "reasoning" and reasoning.summary == []
    assert reasoning.content[0].text == "The tool said it."


def codex_config(base_url: str) -> str:
    """The ``~/.codex/config.toml`` docs/serve.md gives (the model and the server's URL)."""
    return (
        f'model = "{MODEL}"\n'
        'model_provider = "harmonia"\n'
        "show_raw_agent_reasoning = true\n\n"
        "[model_providers.harmonia]\n"
        'name = "harmonia"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
    )


def test_codex_exec_shell_round_trip(make_server, tmp_path):
    codex = shutil.which("codex")
    if codex is None:
        pytest.skip("the Codex CLI is not installed (npm i -g @openai/codex)")
    server = make_server()
    server.book.add(CODEX_CALL)
    server.book.add(CODEX_ANSWER)
    home, work, temp = tmp_path / "codex-home", tmp_path / "work", tmp_path / "tmp"
    for folder in (home, work, temp):
        folder.mkdir()
    (home / "config.toml").write_text(codex_config(server.base_url))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    # Codex installs its sandbox helper in CODEX_HOME, but never under the temporary
    # folder: give it another one than the folder pytest's tmp_path lies in.
    env.update(CODEX_HOME=str(home), TMPDIR=str(temp))
    done = subprocess.run(
        [codex, "exec", "--skip-git-repo-check", "Print the answer with the shell."],
        cwd=work, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "The shell printed harmonia-42." in done.stdout
    assert "Run it." in done.stderr  # the reasoning, shown (show_raw_agent_reasoning)
    # The command ran on this machine and its output came back as the tool's result.
    assert "harmonia-42" in _last_prompt(server).split("to=functions.exec_command", 1)[1]
    assert "echo harmonia-$((6*7))" in _last_prompt(server)
    assert Path(work).exists()


def test_codex_exec_over_websocket_two_turns(make_server, tmp_path, caplog):
    """``supports_websockets = true``: Codex dials ws://.../v1/responses, and both turns
    (``codex exec``, then ``codex exec resume --last``) go over the socket, no HTTP
    fallback (the server's log shows the upgrades and no POST /v1/responses)."""
    codex = shutil.which("codex")
    if codex is None:
        pytest.skip("the Codex CLI is not installed (npm i -g @openai/codex)")
    caplog.set_level(logging.INFO, logger="harmonia.serve")
    server = make_server()
    server.book.add(CODEX_CALL)
    server.book.add(CODEX_ANSWER)
    server.book.add("<|channel|>final<|message|>Second turn: still 42.<|return|>")
    home, work, temp = tmp_path / "codex-home", tmp_path / "work", tmp_path / "tmp"
    for folder in (home, work, temp):
        folder.mkdir()
    config = codex_config(server.base_url) + "supports_websockets = true\n"
    (home / "config.toml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), TMPDIR=str(temp))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [codex, "exec", *args], cwd=work, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip

    first = run("--skip-git-repo-check", "Print the answer with the shell.")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "The shell printed harmonia-42." in first.stdout
    second = run("resume", "--last", "--skip-git-repo-check", "And again?")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Second turn: still 42." in second.stdout
    log = "\n".join(record.getMessage() for record in caplog.records)
    assert "WebSocket /v1/responses open" in log
    assert "POST /v1/responses " not in log, log  # no fallback to HTTP
    # The second turn's prompt holds the first turn's tool result.
    assert "harmonia-42" in _last_prompt(server) and "And again?" in _last_prompt(server)


def test_codex_compacts_a_long_session_over_websocket(make_server, tmp_path):
    """Codex's own compaction against the server: with a tiny auto-compact limit the
    second turn starts with Codex asking the model for a summary (over the socket), and
    the turn after it is prompted from that summary. Codex 0.171 compacts this way
    for a provider other than OpenAI's; it does not call /v1/responses/compact."""
    codex = shutil.which("codex")
    if codex is None:
        pytest.skip("the Codex CLI is not installed (npm i -g @openai/codex)")
    server = make_server()
    summary = "Summary-7Q: the user said hello twice."
    server.book.add("<|channel|>final<|message|>First answer.<|return|>")
    server.book.add(f"<|channel|>final<|message|>{summary}<|return|>")
    server.book.add("<|channel|>final<|message|>After compaction.<|return|>")
    home, work, temp = tmp_path / "codex-home", tmp_path / "work", tmp_path / "tmp"
    for folder in (home, work, temp):
        folder.mkdir()
    config = codex_config(server.base_url).replace(
        'model_provider = "harmonia"\n',
        'model_provider = "harmonia"\nmodel_auto_compact_token_limit = 200\n',
    )
    (home / "config.toml").write_text(config + "supports_websockets = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), TMPDIR=str(temp))
    outputs = []
    for args in (["Hello"], ["resume", "--last", "Hello again"]):
        done = subprocess.run(
            [codex, "exec", "--skip-git-repo-check", *args] if args[0] != "resume"
            else [codex, "exec", "resume", "--last", "--skip-git-repo-check", *args[2:]],
            cwd=work, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "context compacted" in outputs[1]
    assert "After compaction." in outputs[1]
    # The last turn is prompted from the model's summary, not from the first turn's answer.
    assert summary in _last_prompt(server)
    assert "First answer." not in _last_prompt(server)


# -- the Vercel AI SDK's Open Responses provider (a strict client: zod schemas) ------------

AI_SDK_DIR_ENV = "HARMONIA_AI_SDK_DIR"


def test_vercel_ai_sdk_open_responses_provider(make_server):
    """``@ai-sdk/open-responses`` (npm), which parses every object and event with the
    spec's zod schemas: generateText, streamText and a tool-call round trip."""
    folder = Path(os.environ.get(AI_SDK_DIR_ENV, Path.home() / ".cache" / "harmonia-ai-sdk"))
    node = shutil.which("node")
    if node is None or not (folder / "node_modules" / "@ai-sdk" / "open-responses").is_dir():
        pytest.skip(
            f"the AI SDK is not installed in {folder} (npm install --prefix {folder} "
            "ai@7.0.173 @ai-sdk/open-responses@2.0.36 zod@4.6.7; .ci/run does)"
        )
    server = make_server()
    server.book.add(
        "<|channel|>analysis<|message|>Easy.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Paris.<|return|>"
    )
    server.book.add("<|channel|>final<|message|>Hello there!<|return|>")
    server.book.add(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}<|call|>'
    )
    server.book.add("<|channel|>final<|message|>It is sunny in Paris.<|return|>")
    # ESM resolves packages from the script's folder: the script runs from the install.
    script = folder / "harmonia_ai_sdk_client.mjs"
    shutil.copy(Path(__file__).parent / "js" / "ai_sdk_client.mjs", script)
    done = subprocess.run(
        [node, str(script), server.base_url, MODEL],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)
    assert seen["generated"] == {"text": "Paris.", "finishReason": "stop"}
    assert "".join(seen["streamed"]["pieces"]) == seen["streamed"]["text"] == "Hello there!"
    assert seen["streamed"]["finishReason"] == "stop"
    assert seen["tool"] == {"calls": ["Paris"], "text": "It is sunny in Paris.", "steps": 2}
    # The tool's result reached the model as the call's answer.
    assert "get_weather to=assistant" in _last_prompt(server)
    assert "Sunny in Paris, 21 C" in _last_prompt(server)
