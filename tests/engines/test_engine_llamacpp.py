"""The llama.cpp engine against a fake llama-server, and the Lark-to-GBNF translation."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from http_engine_support import HANG_GUARD, PROMPT, cancel_after_three_ids, complete

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
from harmonia._tokenizer import get_tokenizer
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

SCRIPT = [200005, 17196, 200008, 1008, 2201, 3, 200002]
#: What the gpt-oss GGUF marks end-of-generation.
EOG = {200002, 200012, 199999}


def _incomplete(data: bytes) -> bool:
    """True when ``data`` ends inside a UTF-8 character, as llama-server checks it.

    Only a lead byte among the last four bytes that lacks its continuation counts
    (llama-server's ``validate_utf8``): bytes that are not UTF-8 at all are sent.
    """
    for i in range(1, min(4, len(data)) + 1):
        byte = data[-i]
        for mask, lead, need in ((0xE0, 0xC0, 2), (0xF0, 0xE0, 3), (0xF8, 0xF0, 4)):
            if byte & mask == lead and i < need:
                return True
    return False


def llama_server(
    script: Sequence[int] = SCRIPT,
    *,
    delay: float = 0.0,
    fault: str | None = None,
    send_eog: bool = True,
    raw_bytes: bool = True,
) -> Any:
    """A fake llama-server /completion that streams as the real one does.

    It replays ``script`` and stops at an end-of-generation id or n_predict. Like
    llama-server, it sends no chunk for an id that leaves an incomplete UTF-8
    character (the next chunk's ``content`` holds its bytes, its ``tokens`` only its
    own id), every chunk says ``tokens_predicted``, and the last chunk has no ids.
    ``content`` writes bytes that are not UTF-8 as U+FFFD; a special token writes
    its text only when the request lists it in ``preserved_tokens``. With
    ``n_probs`` each chunk carries ``completion_probabilities`` for its own id only,
    in the real server's shape (``post_sampling_probs`` false), its ``bytes`` the
    raw bytes of the chunk's text (``raw_bytes=False``: no entries at all, as from
    a server that sends none). ``send_eog=False``: no special token writes text and
    an end id gets no chunk.
    """
    table = get_tokenizer().token_bytes_table

    def probabilities(token: int, n_probs: int, sent: bytes) -> list[Any]:
        def entry(t: int, logprob: float, raw: bytes) -> dict[str, Any]:
            return {
                "id": t,
                "token": raw.decode("utf-8", "ignore"),
                "bytes": list(raw),
                "logprob": logprob,
            }

        top = [
            entry(token + j, fake_logprob(token + j, j), table[token + j]) for j in range(n_probs)
        ]
        # The sampled id's own entry carries the raw bytes of the chunk's whole text.
        return [{**entry(token, fake_logprob(token, 0), sent), "top_logprobs": top}]

    def written(token: int, preserved: list[str]) -> bytes:
        # A special token writes its text only when the request preserves it.
        raw = table[token]
        if token >= 199998 and raw.decode() not in preserved:
            return b""
        return raw

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
        text = b""
        n = -1
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
            eog = token in EOG
            preserved = ex.body.get("preserved_tokens", []) if send_eog else []
            text += written(token, preserved)
            if not _incomplete(text) and (send_eog or not eog):
                # JSON text: bytes that are not UTF-8 become U+FFFD, as llama-server writes them.
                content = text.decode("utf-8", "replace")
                sent, text = text, b""
                chunk = {
                    "index": 0,
                    "content": content,
                    "tokens": [token],
                    "stop": False,
                    "id_slot": 0,
                    "tokens_predicted": n + 1,
                    "tokens_evaluated": len(ex.body["prompt"]),
                }
                if ex.body.get("n_probs", 0) > 0 and raw_bytes:
                    chunk["completion_probabilities"] = probabilities(
                        token, ex.body["n_probs"], sent
                    )
                if not ex.event(chunk):
                    return
            if eog:
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


def fake_logprob(token: int, rank: int) -> float:
    """The fake server's logprob of ``token`` as the ``rank``-th alternative (0: sampled)."""
    return -0.5 - rank - (token % 7) / 100


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
        "n_predict": 32 + 3,  # a few more, to complete a character cut at the limit
        "temperature": 0.5,
        "top_p": 0.8,
        "top_k": 0,
        "min_p": 0.0,
        "repeat_penalty": 1.0,
        "seed": 3,
        "stream": True,
        "return_tokens": True,
        "cache_prompt": True,
        "n_probs": 1,  # each chunk's entry carries the raw bytes of its text
        "post_sampling_probs": False,
        "preserved_tokens": [
            "<|startoftext|>",
            "<|endoftext|>",
            "<|return|>",
            "<|constrain|>",
            "<|channel|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|call|>",
        ],
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
    (exchange,) = server.exchanges
    assert exchange.gone.wait(HANG_GUARD), "the server never saw the client leave"
    assert len(exchange.sent) <= 5 + 2  # the server stopped right after the stop id


def test_cancel_is_seen_by_the_server_within_one_token(fake_server: Any) -> None:
    server = fake_server(llama_server([13] * 500, delay=0.05))
    engine = LlamaCppEngine(server.url)

    exchange, sent_at_cancel = asyncio.run(cancel_after_three_ids(engine, server))
    # At most the event whose write had begun when the client closed the stream.
    assert len(exchange.sent) - sent_at_cancel <= 1


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
    # llama-server masks its end-of-generation ids until the grammar is complete: a
    # grammar that required one could never end.
    assert "<[200002]>" not in body["grammar"] and "<[200012]>" not in body["grammar"]


def test_json_schemas_are_compiled_by_default_and_policies_apply(fake_server: Any) -> None:
    server = fake_server(llama_server())
    constraint = Constraint.from_conversation(_conversation(tools=True))
    asyncio.run(complete(LlamaCppEngine(server.url), constraint=constraint))
    (body,) = server.bodies
    assert '"\\"city\\""' in body["grammar"]  # the schema's own property, as GBNF

    async def refused() -> None:
        engine = LlamaCppEngine(server.url, json_args="refuse")
        with pytest.raises(UnsupportedConstraintError, match="JSON schema"):
            engine.generate(PROMPT, constraint=constraint)
        await engine.aclose()

    asyncio.run(refused())
    assert len(server.exchanges) == 1
    asyncio.run(complete(LlamaCppEngine(server.url, json_args="any"), constraint=constraint))
    assert "args-1 ::= jsonx-value" in server.bodies[-1]["grammar"]


_text = get_tokenizer().encode_ordinary
#: <|channel|>final<|message|>Hi
FINAL = [200005, *_text("final"), 200008, *_text("Hi")]
#: <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}
CALL = [
    200005,
    *_text("commentary to=functions.get_weather "),
    200003,
    *_text("json"),
    200008,
    *_text('{"city": "Oslo"}'),
]


@pytest.mark.parametrize(
    ("turn", "server_end", "right_end"),
    [
        (FINAL, 200012, 200002),  # a final answer the server ended with <|call|>
        (FINAL, 199999, 200002),  # ... or with <|endoftext|>
        (CALL, 200002, 200012),  # a tool call ended with <|return|>
        (CALL, 200012, 200012),  # right as it is
    ],
)
def test_the_end_id_is_the_one_the_turn_needs(
    fake_server: Any, enc: HarmonyEncoding, turn: list[int], server_end: int, right_end: int
) -> None:
    assert ("to=" in enc.decode(turn)) == (right_end == 200012)
    server = fake_server(llama_server([*turn, server_end]))
    engine = LlamaCppEngine(server.url)
    constraint = Constraint.from_conversation(_conversation(tools=True))
    completion = asyncio.run(complete(engine, constraint=constraint))
    assert list(completion.tokens) == [*turn, right_end]
    assert completion.finish.stop_token == right_end
    assert engine.repaired_ends == (server_end != right_end)


def test_an_end_id_the_server_never_streamed_is_the_one_the_turn_needs(fake_server: Any) -> None:
    server = fake_server(llama_server([*CALL, 200002], send_eog=False))
    constraint = Constraint.from_conversation(_conversation(tools=True))
    completion = asyncio.run(complete(LlamaCppEngine(server.url), constraint=constraint))
    assert list(completion.tokens) == [*CALL, 200012]


#: '𝔘' is three ids; the first two leave an incomplete UTF-8 character.
SPLIT_CHAR = [43120, 242, 246]


def test_ids_the_stream_left_out_are_recovered(fake_server: Any) -> None:
    script = [200005, 17196, 200008, *SPLIT_CHAR, 1008, *SPLIT_CHAR, 200002]
    server = fake_server(llama_server(script))
    engine = LlamaCppEngine(server.url)
    completion = asyncio.run(complete(engine))
    assert list(completion.tokens) == script
    assert completion.usage.completion_tokens == len(script)
    assert engine.recovered_ids == 4
    (exchange,) = server.exchanges
    # What the server really sent: one chunk per id it did not hold back (then maybe the
    # last, id-less chunk, unless the engine had closed the stream at the stop id).
    assert len(script) - 4 <= len(exchange.sent) <= len(script) - 4 + 1


def test_a_character_cut_at_max_tokens_is_completed_then_cut(fake_server: Any) -> None:
    script = [200005, 17196, 200008, *SPLIT_CHAR, 1008, *[13] * 20]
    server = fake_server(llama_server(script))
    params = SamplingParams(max_tokens=5)  # ends inside the character
    completion = asyncio.run(complete(LlamaCppEngine(server.url), params))
    assert list(completion.tokens) == script[:5]
    assert completion.finish.reason is FinishReason.LENGTH


def test_ids_that_cannot_be_recovered_fail_loudly(fake_server: Any) -> None:
    # The stream ends inside a character: its ids were never sent, nothing tells them.
    server = fake_server(llama_server([200005, 17196, 200008, 43120, 242]))
    with pytest.raises(EngineError, match="never sent"):
        asyncio.run(complete(LlamaCppEngine(server.url), SamplingParams(max_tokens=5)))


def test_gaps_are_split_only_when_the_split_is_unique() -> None:
    from harmonia.engines._gaps import splits

    by_bytes = {b"a": 1, b"b": 2, b"ab": 3, b"c": 4}
    assert splits(b"abc", 3, by_bytes, 2) == [[1, 2, 4]]
    assert splits(b"abc", 2, by_bytes, 2) == [[3, 4]]
    assert len(splits(b"abab", 3, by_bytes, 2)) == 2  # a|b|ab and ab|a|b: ambiguous
    assert splits(b"abx", 2, by_bytes, 2) == []


#: b"\xeb\x84": the first two bytes of a three-byte character, as one id.
CUT = 13199
#: The ids of U+FFFD (b"\xef\xbf\xbd") and " U+FFFD": what a replaced byte looks like.
REPLACEMENT_IDS = {3251, 28151}


@pytest.mark.parametrize("after", [1008, 17196, 200007])
def test_bytes_that_are_not_utf8_are_recovered_from_the_raw_bytes(
    fake_server: Any, after: int
) -> None:
    # b"\xeb\x84" then "...", "final" or <|end|>: not UTF-8, so content says U+FFFD; the
    # id is recovered from the raw bytes, never as the replacement character's own id.
    script = [200005, 17196, 200008, CUT, after, 1008, 200002]
    server = fake_server(llama_server(script))
    engine = LlamaCppEngine(server.url)
    completion = asyncio.run(complete(engine))
    assert list(completion.tokens) == script
    assert engine.recovered_ids == 1
    # What the content alone said: the replacement character, whose own ids are wrong here.
    table = get_tokenizer().token_bytes_table
    assert "\ufffd" in (table[CUT] + table[after]).decode("utf-8", "replace")
    assert not REPLACEMENT_IDS & set(completion.tokens)


def test_replaced_bytes_without_raw_bytes_fail_loudly_naming_the_position(
    fake_server: Any,
) -> None:
    script = [200005, 17196, 200008, CUT, 1008, 200002]
    server = fake_server(llama_server(script, raw_bytes=False))
    with pytest.raises(EngineError, match=r"left out 1 sampled ids at position 3.*U\+FFFD"):
        asyncio.run(complete(LlamaCppEngine(server.url)))


def test_a_left_out_id_that_writes_no_text_is_never_guessed(fake_server: Any) -> None:
    # A reserved special id writes no text: "\xf0\x9d" <|reserved_200100|> "\x94" leave
    # bytes that three single-byte ids would spell too, and "\xf0\x9d" "\x94" as two.
    script = [200005, 17196, 200008, 43120, 200100, 242, 246, 1008, 200002]
    server = fake_server(llama_server(script))
    with pytest.raises(EngineError, match="position 3.*an id that writes no text"):
        asyncio.run(complete(LlamaCppEngine(server.url)))


def test_a_final_answer_ending_inside_a_character_keeps_its_ids(fake_server: Any) -> None:
    # llama.cpp's grammar allows an end id once the text so far completes the grammar,
    # even with a character cut at the last id: the end id's chunk (its text written, as
    # preserved_tokens asks) carries the held-back bytes, so the ids are recovered.
    script = [*FINAL, 43120, 200002]
    server = fake_server(llama_server(script))
    engine = LlamaCppEngine(server.url)
    constraint = Constraint.from_conversation(_conversation(tools=True))
    completion = asyncio.run(complete(engine, constraint=constraint))
    assert list(completion.tokens) == script
    assert completion.finish.stop_token == 200002
    assert engine.recovered_ids == 1


def test_random_byte_soup_gives_the_sampled_ids_or_a_loud_error(fake_server: Any) -> None:
    # Ids of single bytes and byte pairs, mostly not UTF-8, reserved ids among them: every
    # completion is either exactly the script or an EngineError, never other ids.
    import random

    table = get_tokenizer().token_bytes_table
    short = [i for i in range(199998) if len(table[i]) <= 2 and table[i][0] >= 0x80]
    rng = random.Random(31)
    scripts = []
    for _ in range(24):
        body = [rng.choice(short) if rng.random() < 0.8 else rng.choice([1008, 200100, 200007])]
        body += [rng.choice(short) if rng.random() < 0.8 else 1008 for _ in range(11)]
        scripts.append([200005, 17196, 200008, *body, 1008, 200002])
    queue = iter(scripts)
    server = fake_server(lambda ex: llama_server(next(queue))(ex))
    exact = failed = 0
    for script in scripts:
        engine = LlamaCppEngine(server.url)
        try:
            completion = asyncio.run(complete(engine))
        except EngineError as exc:
            assert "cannot be recovered exactly" in str(exc) or "never sent" in str(exc)
            failed += 1
            continue
        assert list(completion.tokens) == script
        exact += 1
    assert exact > failed  # most gaps are recoverable from the raw bytes


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
    # Rules holding special tokens or other rules must be Lark rules (lowercase), not
    # terminals: make them all rules (the language is the same).
    for name in set(re.findall(r"^([A-Z][A-Z0-9_]*):", lark, flags=re.M)):
        lark = re.sub(rf"\b{name}\b", name.lower() + "_r", lark)
    # llama-server ends the turn itself, on an end-of-generation id, once the GBNF is
    # complete: the matcher's turn is the GBNF then one of the two end ids.
    lark = re.sub(r"^start:", "gbnf_root:", lark, flags=re.M)
    return lark + "\nstart: gbnf_root (<[200002]> | <[200012]>)\n"


def test_the_gbnf_accepts_what_the_lark_grammar_accepts(enc: HarmonyEncoding) -> None:
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    from harmonia.constrained import TurnMatcher

    gbnf = lark_to_gbnf(build_turn_grammar(_conversation(tools=True)), json_args="any")
    matcher = TurnMatcher(_gbnf_back_to_lark(gbnf))
    turn = [
        *enc.encode("<|channel|>analysis<|message|>", allowed_special="all"),
        *enc.encode_ordinary('Writing < |end| > here is text; so is "quoted\\".'),
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


def _gbnf_matcher(gbnf: str) -> Any:
    pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")
    from harmonia.constrained import TurnMatcher

    return TurnMatcher(_gbnf_back_to_lark(gbnf))


def test_free_text_cannot_spell_a_special_token(enc: HarmonyEncoding) -> None:
    # llama.cpp matches a special token's text against character rules: free text
    # that could hold "<|" would let <|end|> or a reserved token into a message.
    gbnf = lark_to_gbnf(build_turn_grammar(_conversation(tools=False)))
    head = enc.encode("<|channel|>final<|message|>", allowed_special="all")
    for text in ["a <|end|> b", "x<|reserved_200100|>", "<<|"]:
        matcher = _gbnf_matcher(gbnf)
        with pytest.raises(Exception, match="rejected"):
            matcher.consume_all([*head, *enc.encode_ordinary(text)])
    for text in ["a < b | c", "<<", "x<", "|<a"]:
        matcher = _gbnf_matcher(gbnf)
        matcher.consume_all([*head, *enc.encode_ordinary(text), 200002])
        assert matcher.is_finished


STRICT = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1},
        "unit": {"enum": ["c", "f"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "where": {"$ref": "#/$defs/place"},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
    "$defs": {
        "place": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "near": {"$ref": "#/$defs/place"}},
            "additionalProperties": False,
        }
    },
}


@pytest.mark.parametrize(
    ("arguments", "valid"),
    [
        ('{"city": "Oslo", "unit": "c"}', True),
        ('{"city":"Oslo","days":3,"unit":"f","tags":["a","bcd"]}', True),
        ('{"city": "O", "unit": "c", "where": {"lat": -1.5e2, "near": {}}}', True),
        ('{"unit": "c", "city": "Oslo"}', True),  # any order
        ('{"city": "Oslo", "unit": "c", "city": "Lima"}', False),  # a key repeated
        ('{"city": "Oslo"}', False),  # a required property missing
        ('{"city": "Oslo", "unit": "k"}', False),  # not in the enum
        ('{"city": "Oslo", "unit": "c", "days": 0}', False),  # below the minimum, last
        ('{"city": "Oslo", "days": 0, "unit": "c"}', False),  # below the minimum
        ('{"city": "Oslo", "unit": "c", "x": 1}', False),  # no additional properties
        ('{"city": "Oslo", "unit": "c", "tags": ["abcd"]}', False),  # maxLength
        ('{"city": "Oslo", "unit": "c", "tags": ["a", "b", "c"]}', False),  # maxItems
        ('{"city": "a<|end|>", "unit": "c"}', False),  # a special token's spelling
        ('{"city": "a<b|c", "unit": "c"}', True),
    ],
)
def test_json_schemas_compile_to_gbnf_that_enforces_them(
    enc: HarmonyEncoding, arguments: str, valid: bool
) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    tool = ToolDescription.new("get_weather", "Gets the weather.", parameters=STRICT)
    conversation = Conversation.from_messages(
        [
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([tool])
            ),
            Message.from_role_and_content(Role.USER, "Weather?"),
        ]
    )
    gbnf = lark_to_gbnf(build_turn_grammar(conversation, GrammarOptions(tool_choice="required")))
    call = enc.encode(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
        allowed_special="all",
    )
    matcher = _gbnf_matcher(gbnf)
    if valid:
        jsonschema.validate(json.loads(arguments), STRICT)
        matcher.consume_all([*call, *enc.encode_ordinary(arguments), 200012])
        assert matcher.is_finished
    else:
        with pytest.raises(Exception, match="rejected"):
            matcher.consume_all([*call, *enc.encode_ordinary(arguments), 200012])


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "string", "pattern": "a+"}, "not anchored"),
        ({"type": "string", "pattern": "^a|b$"}, "top-level"),
        ({"type": "string", "pattern": "^\\W+$"}, "negated shorthand"),
        ({"type": "number", "maximum": 2.5}, "whole numbers"),
        ({"type": "string", "format": "hostname"}, "format 'hostname'"),
        ({"type": "string", "format": "date", "maxLength": 3}, "together"),
        ({"type": "integer", "multipleOf": 3}, "multipleOf"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf"),
        ({"$ref": "https://example.com/s.json"}, "only local references"),
    ],
)
def test_schemas_gbnf_cannot_enforce_are_refused(schema: dict[str, Any], message: str) -> None:
    lark = f"start: args\nargs: %json {json.dumps(schema)}\n"
    with pytest.raises(UnsupportedConstraintError, match=message):
        lark_to_gbnf(lark)
    # Lenient schemas (GrammarOptions.lenient_schemas) drop what cannot be enforced.
    lenient = {**schema, "x-guidance": {"lenient": True}}
    if "$ref" not in schema:
        assert "args ::=" in lark_to_gbnf(f"start: args\nargs: %json {json.dumps(lenient)}\n")


def test_logprobs_are_asked_for_and_read_by_id(fake_server: Any) -> None:
    server = fake_server(llama_server())
    params = SamplingParams(max_tokens=32, top_logprobs=2)
    completion = asyncio.run(complete(LlamaCppEngine(server.url), params))
    (exchange,) = server.exchanges
    assert exchange.body["n_probs"] == 2 and exchange.body["post_sampling_probs"] is False
    assert list(completion.tokens) == SCRIPT
    assert [lp.token for lp in completion.logprobs] == SCRIPT
    for lp in completion.logprobs:
        assert lp.logprob == pytest.approx(fake_logprob(lp.token, 0))
        assert lp.top == (
            (lp.token, pytest.approx(fake_logprob(lp.token, 0))),
            (lp.token + 1, pytest.approx(fake_logprob(lp.token + 1, 1))),
        )


def test_top_logprobs_zero_asks_for_one_and_keeps_none(fake_server: Any) -> None:
    server = fake_server(llama_server())
    completion = asyncio.run(complete(LlamaCppEngine(server.url), SamplingParams(top_logprobs=0)))
    assert server.exchanges[0].body["n_probs"] == 1
    assert all(lp.top == () for lp in completion.logprobs)
    plain = asyncio.run(complete(LlamaCppEngine(server.url)))
    # n_probs is always asked for (its entries carry the raw bytes); no logprobs kept.
    assert plain.logprobs is None and server.exchanges[1].body["n_probs"] == 1


def test_ids_recovered_from_the_text_have_no_logprobs_and_fail_loudly(fake_server: Any) -> None:
    script = [200005, 17196, 200008, *SPLIT_CHAR, 200002]
    server = fake_server(llama_server(script))
    with pytest.raises(EngineError, match="logprobs are not"):
        asyncio.run(complete(LlamaCppEngine(server.url), SamplingParams(top_logprobs=1)))


def test_an_end_id_put_in_here_without_a_logprob_fails_loudly(fake_server: Any) -> None:
    server = fake_server(llama_server([*CALL, 200002], send_eog=False))
    constraint = Constraint.from_conversation(_conversation(tools=True))
    params = SamplingParams(top_logprobs=1)
    with pytest.raises(EngineError, match="no log-probability for id 200012"):
        asyncio.run(complete(LlamaCppEngine(server.url), params, constraint=constraint))
