"""The vLLM engine against a fake vLLM that speaks the documented JSON/SSE shapes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from http_engine_support import PROMPT, cancel_after_three_ids, complete

from harmonia import (
    Conversation,
    DeveloperContent,
    EngineError,
    InputError,
    Message,
    Role,
    ToolDescription,
)
from harmonia.constrained import build_turn_grammar
from harmonia.engines import (
    Constraint,
    EngineRefusedError,
    FinishReason,
    HttpOptions,
    SamplingParams,
    SyncEngine,
    UnsupportedConstraintError,
)
from harmonia.engines.vllm import VLLMEngine
from random_model_steering import ForcedMatcher

pytest.importorskip("httpx", reason="httpx is not installed (harmonia[engines-http])")

SCRIPT = [
    200005,
    35644,
    200008,
    1008,
    2201,
    200007,
    200006,
    173781,
    200005,
    17196,
    200008,
    3,
    200002,
]


#: The JSON settings llguidance 1.7 (vLLM 0.32 and 0.33) knows.
LLGUIDANCE_1_7_SETTINGS = {
    "item_separator",
    "key_separator",
    "whitespace_flexible",
    "whitespace_pattern",
    "coerce_one_of",
    "lenient",
    "json_allowed_escapes",
}


def _unknown_settings(grammar: str) -> list[str]:
    unknown = []
    for line in grammar.splitlines():
        if ": %json " in line:
            schema = json.loads(line.split(": %json ", 1)[1])
            unknown += [k for k in schema.get("x-guidance", {}) if k not in LLGUIDANCE_1_7_SETTINGS]
    return unknown


def vllm(
    script: Sequence[int] = SCRIPT,
    *,
    generate: bool = True,
    delay: float = 0.0,
    include_stop_id: bool = True,
    fault: str | None = None,
    old_generate_logprobs: bool = False,
) -> Any:
    """A fake vLLM: replays ``script`` honouring max_tokens and stop_token_ids.

    With ``logprobs`` it answers as vLLM does: the sampled id first, then the
    most likely ones, ``logprobs`` entries in all (``token_id`` ints from the
    generate endpoint, ``"token_id:N"`` text from an older one, and the
    completions endpoint's parallel lists keyed by ``"token_id:N"``).
    """

    def generate_logprobs(token: int, n: int) -> dict[str, Any]:
        ranked = [token, *[token + j for j in range(1, n)]]
        if old_generate_logprobs:
            top = [{"token": f"token_id:{t}", "logprob": fake_logprob(t)} for t in ranked]
            entry = {"token": f"token_id:{token}", "logprob": fake_logprob(token)}
        else:
            top = [{"token_id": t, "logprob": fake_logprob(t)} for t in ranked]
            entry = {"token_id": token, "logprob": fake_logprob(token)}
        return {"content": [{**entry, "top_logprobs": top}]}

    def completions_logprobs(token: int, n: int) -> dict[str, Any]:
        ranked = [token, *[token + j for j in range(1, n + 1)]]
        return {
            "tokens": [f"token_id:{token}"],
            "token_logprobs": [fake_logprob(token)],
            "top_logprobs": [{f"token_id:{t}": fake_logprob(t) for t in ranked}],
            "text_offset": [0],
        }

    def handle(ex: Any) -> None:
        if ex.path == "/inference/v1/generate":
            if not generate:
                ex.json(404, {"detail": "Not Found"})
                return
            params = ex.body["sampling_params"]
        elif ex.path == "/v1/completions":
            params = ex.body
        else:
            ex.json(404, {"detail": "Not Found"})
            return
        grammar = (params.get("structured_outputs") or {}).get("grammar")
        unknown = _unknown_settings(grammar) if grammar else []
        if unknown:  # what vLLM 0.32 answers: its llguidance 1.7 refuses the grammar
            ex.json(
                400,
                {
                    "error": {
                        "message": f"grammar is not valid: unknown field `{unknown[0]}`",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                },
            )
            return
        if fault == "unauthorized":
            ex.json(401, {"error": "Unauthorized"})
            return
        if fault == "status":
            ex.json(
                400,
                {
                    "error": {
                        "message": "This model's maximum context length is 8 tokens",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                },
            )
            return
        ex.start_sse()
        stops = set(params["stop_token_ids"])
        for n, token in enumerate(script):
            if fault == "malformed" and n == 2:
                ex.raw("data: {not json\n\n")
                break
            if fault == "stall" and n == 2:
                ex.sleep(30)  # until the client gives up
                return
            if fault == "error" and n == 2:
                ex.event({"error": {"message": "engine dead", "code": 500}})
                break
            if fault == "truncated" and n == 2:
                break
            if delay and not ex.sleep(delay):
                return
            finish, stop_reason = None, None
            if token in stops:
                finish, stop_reason = "stop", token
            elif n + 1 >= params["max_tokens"]:
                finish = "length"
            ids = [token] if finish != "stop" or include_stop_id else []
            choice = {"index": 0, "finish_reason": finish, "token_ids": ids}
            n = params.get("logprobs")
            if ex.path == "/inference/v1/generate" and n is not None and ids:
                choice["logprobs"] = generate_logprobs(token, max(n, 1))
            if ex.path == "/v1/completions":
                logprobs = completions_logprobs(token, n) if n is not None and ids else None
                choice.update({"text": "", "logprobs": logprobs, "stop_reason": stop_reason})
                if n == 0:
                    choice["prompt_token_ids"] = ex.body["prompt"]
            if not ex.event({"id": "cmpl-1", "object": "text_completion", "choices": [choice]}):
                return
            if finish:
                break
        if ex.path == "/v1/completions" and fault is None:
            ex.event({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": len(PROMPT)}})
        if fault != "truncated":
            ex.event("[DONE]")
        ex.end_sse()

    return handle


def fake_logprob(token: int) -> float:
    """The fake server's logprob of ``token``: lower ids are likelier."""
    return -(token % 1000) / 100 - 0.01


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_completions_request_is_exactly_the_documented_one(
    fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-secret-123")
    server = fake_server(vllm())
    engine = VLLMEngine(server.url, model="gpt-oss-20b", api="completions")
    assert "sk-secret" not in repr(engine)
    params = SamplingParams(max_tokens=50, temperature=0.7, top_p=0.9, seed=7)
    completion = run(complete(engine, params))

    (exchange,) = server.exchanges
    assert exchange.path == "/v1/completions"
    assert exchange.body == {
        "model": "gpt-oss-20b",
        "prompt": PROMPT,
        "max_tokens": 50,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 7,
        "stop_token_ids": [200002, 200012],
        "skip_special_tokens": False,
        "return_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert exchange.headers["authorization"] == "Bearer sk-secret-123"
    assert list(completion.tokens) == SCRIPT
    assert completion.finish.reason is FinishReason.STOP
    assert completion.finish.stop_token == 200002
    assert completion.usage.prompt_tokens == len(PROMPT)


def test_generate_endpoint_request_and_fallback(fake_server: Any) -> None:
    with_generate = fake_server(vllm())
    completion = run(complete(VLLMEngine(with_generate.url), SamplingParams(max_tokens=64)))
    (exchange,) = with_generate.exchanges
    assert exchange.path == "/inference/v1/generate"
    assert exchange.body == {
        "token_ids": PROMPT,
        "sampling_params": {
            "max_tokens": 64,
            "temperature": 1.0,
            "top_p": 1.0,
            "stop_token_ids": [200002, 200012],
            "skip_special_tokens": False,
        },
        "stream": True,
    }
    assert list(completion.tokens) == SCRIPT

    without = fake_server(vllm(generate=False))
    engine = VLLMEngine(without.url)

    async def twice() -> list[Any]:
        try:
            return [await engine.generate(PROMPT).result() for _ in range(2)]
        finally:
            await engine.aclose()

    first, second = run(twice())
    assert [e.path for e in without.exchanges] == [
        "/inference/v1/generate",
        "/v1/completions",
        "/v1/completions",  # the 404 is remembered
    ]
    assert list(first.tokens) == list(second.tokens) == SCRIPT


def test_length_and_a_stop_id_left_out_of_token_ids(fake_server: Any) -> None:
    server = fake_server(vllm())
    completion = run(
        complete(VLLMEngine(server.url, api="completions"), SamplingParams(max_tokens=4))
    )
    assert list(completion.tokens) == SCRIPT[:4]
    assert completion.finish.reason is FinishReason.LENGTH

    server = fake_server(vllm(include_stop_id=False))
    completion = run(complete(VLLMEngine(server.url, api="completions")))
    assert list(completion.tokens) == SCRIPT  # the stop id is put back from stop_reason
    assert completion.finish.stop_token == 200002


def test_constraint_goes_as_a_grammar(fake_server: Any) -> None:
    conversation = Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")])
    server = fake_server(vllm())
    constraint = Constraint.from_conversation(conversation)
    run(complete(VLLMEngine(server.url, api="generate"), constraint=constraint))
    (body,) = server.bodies
    assert body["sampling_params"]["structured_outputs"] == {
        "grammar": build_turn_grammar(conversation)
    }


def test_a_matcher_only_constraint_is_refused_before_sending(fake_server: Any) -> None:
    server = fake_server(vllm())
    engine = VLLMEngine(server.url)

    async def main() -> None:
        with pytest.raises(UnsupportedConstraintError, match="grammar"):
            engine.generate(PROMPT, constraint=Constraint(matcher=ForcedMatcher([1])))
        await engine.aclose()

    run(main())
    assert server.exchanges == []


def test_cancel_is_seen_by_the_server_within_one_token(fake_server: Any) -> None:
    server = fake_server(vllm([13] * 500, delay=0.05))
    engine = VLLMEngine(server.url, api="completions")

    exchange, sent_at_cancel = run(cancel_after_three_ids(engine, server))
    # At most the event whose write had begun when the client closed the stream.
    assert len(exchange.sent) - sent_at_cancel <= 1


def test_unreachable_server(closed_port_url: str) -> None:
    engine = VLLMEngine(closed_port_url, options=HttpOptions(connect_timeout=2))
    with pytest.raises(EngineError, match="cannot connect") as info:
        run(complete(engine))
    assert closed_port_url in str(info.value)
    assert "check that the server is running" in str(info.value)
    assert info.value.engine == "vllm"
    assert info.value.url == closed_port_url + "/inference/v1/generate"


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("status", "HTTP 400: This model's maximum context length is 8 tokens"),
        ("malformed", "malformed stream data"),
        ("error", "the server reported an error: engine dead"),
        ("truncated", "ended without a finish_reason"),
        ("stall", "stalled: no data for 0.5 s"),
    ],
)
def test_server_faults_are_engine_errors(fake_server: Any, fault: str, message: str) -> None:
    server = fake_server(vllm(fault=fault))
    engine = VLLMEngine(server.url, api="completions", options=HttpOptions(read_timeout=0.5))

    async def main() -> Any:
        generation = engine.generate(PROMPT)
        with pytest.raises(EngineError) as info:
            async for _ in generation:
                pass
        await engine.aclose()
        return generation, info.value

    generation, error = run(main())
    assert message in str(error)
    assert generation.finish.reason is FinishReason.ERROR
    if fault in ("malformed", "error", "truncated", "stall"):
        assert list(generation.tokens) == SCRIPT[:2]  # what came before the fault is kept


def test_a_refused_key_is_reported_without_the_key(fake_server: Any) -> None:
    server = fake_server(vllm(fault="unauthorized"))
    engine = VLLMEngine(server.url, api="completions", api_key="sk-wrong-456")
    with pytest.raises(EngineError) as info:
        run(complete(engine))
    assert "HTTP 401: Unauthorized; check the API key" in str(info.value)
    assert "sk-wrong" not in str(info.value)
    assert server.exchanges[0].headers["authorization"] == "Bearer sk-wrong-456"


def test_sync_engine_over_http(fake_server: Any) -> None:
    server = fake_server(vllm())
    with SyncEngine(VLLMEngine(server.url)) as engine:
        completion = engine.generate(PROMPT, SamplingParams(max_tokens=20)).result()
    assert list(completion.tokens) == SCRIPT


def _tool_conversation() -> Conversation:
    weather = ToolDescription.new(
        "get_weather",
        "Gets the weather.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    developer = DeveloperContent.new().with_function_tools([weather])
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.DEVELOPER, developer),
            Message.from_role_and_content(Role.USER, "Weather in Tokyo?"),
        ]
    )


def test_json_schema_grammars_compile_on_the_servers_llguidance(fake_server: Any) -> None:
    # vLLM 0.32/0.33 run llguidance 1.7, which refuses a grammar naming a 1.9-only setting.
    server = fake_server(vllm())
    constraint = Constraint.from_conversation(_tool_conversation())
    completion = run(complete(VLLMEngine(server.url, api="generate"), constraint=constraint))
    assert completion.finish.reason is FinishReason.STOP
    (body,) = server.bodies
    sent = body["sampling_params"]["structured_outputs"]["grammar"]
    assert "%json" in sent and "whitespace_pattern" in sent
    assert "json_allow_general_unicode_escapes" not in sent


def test_a_grammar_the_server_refuses_is_a_refusal_naming_vllm(fake_server: Any) -> None:
    server = fake_server(vllm())
    grammar = 'start: a\na: %json {"x-guidance": {"json_allow_general_unicode_escapes": true}}'
    engine = VLLMEngine(server.url, api="generate", llguidance="1.9")  # the wrong version
    with pytest.raises(EngineRefusedError, match="unknown field") as info:
        run(complete(engine, constraint=Constraint(grammar=grammar)))
    assert info.value.status == 400
    assert info.value.engine == "vllm"
    assert str(info.value).startswith("vllm at ")


def test_the_llguidance_version_is_checked_up_front() -> None:
    with pytest.raises(InputError, match="llguidance"):
        VLLMEngine("http://127.0.0.1:9", llguidance="latest")


@pytest.mark.parametrize(
    ("api", "old"), [("generate", False), ("generate", True), ("completions", False)]
)
def test_logprobs_are_asked_for_and_read_by_id(fake_server: Any, api: str, old: bool) -> None:
    server = fake_server(vllm(old_generate_logprobs=old))
    engine = VLLMEngine(server.url, api=api)  # type: ignore[arg-type]

    async def main() -> Any:
        try:
            return await engine.generate(PROMPT, SamplingParams(top_logprobs=2)).result()
        finally:
            await engine.aclose()

    completion = run(main())
    (exchange,) = server.exchanges
    params = exchange.body["sampling_params"] if api == "generate" else exchange.body
    assert params["logprobs"] == 3  # the sampled id comes first in vLLM's list
    if api == "completions":
        assert exchange.body["return_tokens_as_token_ids"] is True
    assert list(completion.tokens) == SCRIPT
    assert [lp.token for lp in completion.logprobs] == SCRIPT
    for lp in completion.logprobs:
        assert lp.logprob == pytest.approx(fake_logprob(lp.token))
        assert len(lp.top) == 2
        values = [value for _, value in lp.top]
        assert values == sorted(values, reverse=True)
        assert all(value == pytest.approx(fake_logprob(t)) for t, value in lp.top)


def test_logprobs_stay_off_unless_asked(fake_server: Any) -> None:
    server = fake_server(vllm())
    engine = VLLMEngine(server.url, api="completions")

    async def main() -> Any:
        try:
            return await engine.generate(PROMPT).result()
        finally:
            await engine.aclose()

    assert run(main()).logprobs is None
    assert "logprobs" not in server.exchanges[0].body
    assert "return_tokens_as_token_ids" not in server.exchanges[0].body


def test_a_stop_id_left_out_with_its_logprob_fails_loudly(fake_server: Any) -> None:
    server = fake_server(vllm(include_stop_id=False))
    engine = VLLMEngine(server.url, api="completions")  # the one that says stop_reason

    async def main() -> Any:
        try:
            return await engine.generate(PROMPT, SamplingParams(top_logprobs=0)).result()
        finally:
            await engine.aclose()

    with pytest.raises(EngineError, match="stop id 200002 out of token_ids"):
        run(main())
