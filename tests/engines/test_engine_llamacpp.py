"""The llama.cpp engine against a fake llama-server, and the Lark-to-GBNF translation."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest

from harmonia import (
    Conversation,
    DeveloperContent,
    EngineError,
    HarmonyEncoding,
    Message,
    Role,
    SystemContent,
    ToolDescription,
)
from harmonia.constrained import GrammarOptions, build_turn_grammar
from harmonia.engines import (
    Constraint,
    FinishReason,
    HttpOptions,
    SamplingParams,
    UnsupportedConstraintError,
)
from harmonia.engines.llamacpp import LlamaCppEngine, lark_to_gbnf

pytest.importorskip("httpx", reason="httpx is not installed (harmonia[engines-http])")

PROMPT = [200006, 17360, 200008, 12, 200007, 200006, 173781]
SCRIPT = [200005, 17196, 200008, 1008, 2201, 3, 200002]
#: What the gpt-oss GGUF marks end-of-generation.
EOG = {200002, 200012}


def llama_server(
    script: Sequence[int] = SCRIPT, *, delay: float = 0.0, fault: str | None = None
) -> Any:
    """A fake llama-server /completion: replays ``script``, stops at EOG or n_predict."""

    def handle(ex: Any) -> None:
        if ex.path != "/completion":
            ex.json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found"}})
            return
        if fault == "status":
            ex.json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "the request exceeds the available context size",
                        "type": "exceed_context_size_error",
                    }
                },
            )
            return
        ex.start_sse()
        n_predict = ex.body["n_predict"]
        stop_type = "limit"
        for n, token in enumerate(script):
            if fault == "error" and n == 2:
                error = {"code": 500, "message": "failed to decode", "type": "server_error"}
                ex.raw(f"error: {json.dumps(error)}\n\n")
                ex.end_sse()
                return
            if fault == "stall" and n == 2:
                ex.sleep(30)
                return
            if delay and not ex.sleep(delay):
                return
            chunk = {"index": 0, "content": "x", "tokens": [token], "stop": False, "id_slot": 0}
            if not ex.event(chunk):
                return
            if token in EOG:
                stop_type = "eos"
                break
            if n + 1 >= n_predict:
                break
        ex.event(
            {
                "index": 0,
                "content": "",
                "tokens": [],
                "stop": True,
                "stop_type": stop_type,
                "stopping_word": "",
                "tokens_predicted": n + 1,
                "tokens_evaluated": len(ex.body["prompt"]),
                "timings": {"predicted_per_second": 50.0},
            }
        )
        ex.end_sse()

    return handle


async def complete(engine: LlamaCppEngine, params: SamplingParams | None = None, **kw: Any) -> Any:
    try:
        return await engine.generate(PROMPT, params, **kw).result()
    finally:
        await engine.aclose()


def _conversation(tools: bool) -> Conversation:
    messages = [Message.from_role_and_content(Role.SYSTEM, SystemContent.new())]
    if tools:
        weather = ToolDescription.new(
            "get_weather",
            "Gets the weather.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        )
        messages.append(
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([weather])
            )
        )
    messages.append(Message.from_role_and_content(Role.USER, "Weather in Tokyo?"))
    return Conversation.from_messages(messages)


def test_request_is_exactly_the_documented_one(
    fake_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", "llama-key-9")
    server = fake_server(llama_server())
    engine = LlamaCppEngine(server.url)
    assert "llama-key" not in repr(engine)
    completion = asyncio.run(
        complete(engine, SamplingParams(max_tokens=32, temperature=0.5, top_p=0.8, seed=3))
    )
    (exchange,) = server.exchanges
    assert exchange.path == "/completion"
    assert exchange.body == {
        "prompt": PROMPT,
        "n_predict": 32,
        "temperature": 0.5,
        "top_p": 0.8,
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "seed": 3,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
    }
    assert exchange.headers["authorization"] == "Bearer llama-key-9"
    assert list(completion.tokens) == SCRIPT
    assert completion.finish.reason is FinishReason.STOP
    assert completion.finish.stop_token == 200002


def test_length_limit(fake_server: Any) -> None:
    server = fake_server(llama_server())
    completion = asyncio.run(complete(LlamaCppEngine(server.url), SamplingParams(max_tokens=3)))
    assert list(completion.tokens) == SCRIPT[:3]
    assert completion.finish.reason is FinishReason.LENGTH


def test_a_stop_id_the_server_does_not_stop_on_is_enforced_here(fake_server: Any) -> None:
    # <|end|> (200007) is no end-of-generation id for the server; the engine stops on it.
    script = [200005, 35644, 200008, 1008, 200007, *[13] * 200]
    server = fake_server(llama_server(script, delay=0.02))
    params = SamplingParams(max_tokens=200, stop_token_ids=(200007,))
    completion = asyncio.run(complete(LlamaCppEngine(server.url), params))
    assert list(completion.tokens) == script[:5]
    assert completion.finish.stop_token == 200007
    time.sleep(0.1)
    (exchange,) = server.exchanges
    assert exchange.disconnected_at is not None
    assert len(exchange.sent) <= 5 + 2  # the server stopped right after the stop id


def test_cancel_is_seen_by_the_server_within_one_token(fake_server: Any) -> None:
    server = fake_server(llama_server([13] * 500, delay=0.05))
    engine = LlamaCppEngine(server.url)

    async def main() -> float:
        generation = engine.generate(PROMPT, SamplingParams(max_tokens=500))
        seen = 0
        async for ids in generation:
            seen += len(ids)
            if seen >= 3:
                break
        cancelled_at = time.perf_counter()
        await generation.cancel()
        assert generation.finish is not None
        assert generation.finish.reason is FinishReason.CANCELLED
        await asyncio.sleep(0.3)
        await engine.aclose()
        return cancelled_at

    cancelled_at = asyncio.run(main())
    (exchange,) = server.exchanges
    assert exchange.disconnected_at is not None
    assert len([t for t in exchange.sent if t > cancelled_at]) <= 1


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("status", "HTTP 400: the request exceeds the available context size"),
        ("error", "the server reported an error: failed to decode"),
        ("stall", "stalled"),
    ],
)
def test_server_faults_are_engine_errors(fake_server: Any, fault: str, message: str) -> None:
    server = fake_server(llama_server(fault=fault))
    engine = LlamaCppEngine(server.url, options=HttpOptions(read_timeout=0.5))
    with pytest.raises(EngineError, match=re.escape(message)) as info:
        asyncio.run(complete(engine))
    assert info.value.engine == "llama.cpp"
    assert server.url in str(info.value)


def test_unreachable_server(closed_port_url: str) -> None:
    with pytest.raises(EngineError, match="cannot connect"):
        asyncio.run(complete(LlamaCppEngine(closed_port_url)))


def test_constraint_is_sent_as_gbnf(fake_server: Any) -> None:
    conversation = _conversation(tools=False)
    server = fake_server(llama_server())
    engine = LlamaCppEngine(server.url)
    asyncio.run(complete(engine, constraint=Constraint.from_conversation(conversation)))
    (body,) = server.bodies
    assert body["grammar"] == lark_to_gbnf(build_turn_grammar(conversation))
    assert body["grammar"].startswith("root ::= ")
    assert "<[200002]>" in body["grammar"]


def test_json_schemas_are_refused_unless_relaxed_explicitly(fake_server: Any) -> None:
    server = fake_server(llama_server())
    constraint = Constraint.from_conversation(_conversation(tools=True))

    async def refused() -> None:
        engine = LlamaCppEngine(server.url)
        with pytest.raises(UnsupportedConstraintError, match="JSON schema"):
            engine.generate(PROMPT, constraint=constraint)
        await engine.aclose()

    asyncio.run(refused())
    assert server.exchanges == []
    asyncio.run(complete(LlamaCppEngine(server.url, json_args="any"), constraint=constraint))
    (body,) = server.bodies
    assert "json-value ::=" in body["grammar"]


def test_token_bounded_rules_are_refused() -> None:
    lark = build_turn_grammar(_conversation(tools=False), GrammarOptions(analysis_max_tokens=8))
    with pytest.raises(UnsupportedConstraintError, match="bounded in tokens"):
        lark_to_gbnf(lark)


def _gbnf_back_to_lark(gbnf: str) -> str:
    """llguidance's own GBNF reader, taught llama.cpp's ``<[id]>`` token references."""
    from llguidance.gbnf_to_lark import gbnf_to_lark

    ids = sorted(set(re.findall(r"<\[(\d+)\]>", gbnf)))
    placeholders = "\n".join(f'tokref{i} ::= "@@{i}@@"' for i in ids)
    lark = gbnf_to_lark(re.sub(r"<\[(\d+)\]>", r"tokref\1", gbnf) + "\n" + placeholders)
    lark = re.sub(r"TOKREF(\d+)", r"<[\1]>", lark)
    lark = "\n".join(line for line in lark.splitlines() if not line.startswith("<["))
    # Rules holding special tokens must be Lark rules (lowercase), not terminals.
    for name in set(re.findall(r"^([A-Z][A-Z0-9_]*):.*<\[", lark, flags=re.M)):
        lark = re.sub(rf"\b{name}\b", name.lower(), lark)
    return lark


def test_the_gbnf_accepts_what_the_lark_grammar_accepts(enc: HarmonyEncoding) -> None:
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    from harmonia.constrained import TurnMatcher

    gbnf = lark_to_gbnf(build_turn_grammar(_conversation(tools=True)), json_args="any")
    matcher = TurnMatcher(_gbnf_back_to_lark(gbnf))
    turn = [
        *enc.encode("<|channel|>analysis<|message|>", allowed_special="all"),
        *enc.encode_ordinary('Writing <|end|> here is text; so is "quoted\\".'),
        *enc.encode(
            "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather"
            ' <|constrain|>json<|message|>{"city": "Tokyo", "n": [1, -2.5e3, true, null]}<|call|>',
            allowed_special="all",
        ),
    ]
    matcher.consume_all(turn)
    assert matcher.is_finished
    # And it refuses what the harmony structure forbids: an undeclared tool.
    stray = TurnMatcher(_gbnf_back_to_lark(gbnf))
    wrong = enc.encode("<|channel|>commentary to=functions.get_time", allowed_special="all")
    with pytest.raises(Exception, match="rejected"):
        stray.consume_all(wrong)
