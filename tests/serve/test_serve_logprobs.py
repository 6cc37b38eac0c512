"""Log-probabilities through the server, read by the openai SDK (issue 27).

On the scripted engine the values are its documented ones (the scripted id
at probability 1/2); on the teacher-forced transformers engine they are the
random model's. Either way: only the visible text's tokens, aligned with it,
in OpenAI's shape, streamed and not, Chat and Responses.
"""

from __future__ import annotations

import math
from typing import Any

import openai
import pytest
from serve_support import MODEL, post

from harmonia.engines import SamplingParams, ScriptedEngine, refuse_logprobs

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
#: Reasoning, then an answer: only the answer's tokens have logprobs in the API.
REPLY = (
    "<|channel|>analysis<|message|>Say hello.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there, friend!<|return|>"
)
ANSWER = "Hello there, friend!"


def _check_entries(entries: list[Any], text: str, top: int, engine: Any) -> None:
    """Tokens join to ``text``; bytes are the token's; alternatives sorted, ``top`` of them."""
    assert "".join(e.token for e in entries) == text
    assert len(entries) > 1
    for entry in entries:
        assert bytes(entry.bytes) == entry.token.encode()
        assert entry.logprob <= 0
        values = [alt.logprob for alt in entry.top_logprobs]
        assert len(values) == top
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-6
        if engine.name == "scripted":
            assert entry.logprob == pytest.approx(-math.log(2))
            if top:
                assert entry.top_logprobs[0].token == entry.token


def test_chat_logprobs_cover_the_answer_only(srv: Any) -> None:
    srv.book.add(REPLY)
    completion = srv.client().chat.completions.create(**CHAT, logprobs=True, top_logprobs=2)
    choice = completion.choices[0]
    assert choice.message.content == ANSWER
    assert choice.logprobs is not None and choice.logprobs.refusal is None
    _check_entries(choice.logprobs.content, ANSWER, 2, srv.engine)
    (generation,) = srv.engine.generations[-1:]
    assert generation.params.top_logprobs == 2


def test_chat_stream_sends_each_deltas_logprobs_with_it(srv: Any) -> None:
    srv.book.add(REPLY)
    stream = srv.client().chat.completions.create(
        **CHAT, logprobs=True, top_logprobs=1, stream=True
    )
    entries: list[Any] = []
    text = ""
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta.content or ""
        text += delta
        if choice.logprobs is not None and choice.logprobs.content is not None:
            assert delta, "logprobs come with the content they are for"
            entries += choice.logprobs.content
        else:
            assert not delta or not delta.strip(), f"content {delta!r} without its logprobs"
    assert text == ANSWER
    _check_entries(entries, ANSWER, 1, srv.engine)


def test_chat_logprobs_true_alone_gives_no_alternatives(srv: Any) -> None:
    srv.book.add(REPLY)
    completion = srv.client().chat.completions.create(**CHAT, logprobs=True)
    _check_entries(completion.choices[0].logprobs.content, ANSWER, 0, srv.engine)
    assert srv.engine.generations[-1].params.top_logprobs == 0


def test_no_logprobs_unless_asked(srv: Any) -> None:
    srv.book.add(REPLY)
    completion = srv.client().chat.completions.create(**CHAT)
    assert completion.choices[0].logprobs is None
    assert srv.engine.generations[-1].params.top_logprobs is None
    srv.book.add(REPLY)
    response = srv.client().responses.create(model=MODEL, input="Hi")
    assert response.output[-1].content[0].logprobs == []


def test_top_logprobs_without_logprobs_is_a_400(srv: Any) -> None:
    error = post(srv, "/chat/completions", {**CHAT, "top_logprobs": 3})
    assert error.status_code == 400
    assert error.json()["error"]["param"] == "top_logprobs"


@pytest.mark.parametrize(
    "ask",
    [{"include": ["message.output_text.logprobs"]}, {"top_logprobs": 2}],
    ids=["include", "top_logprobs"],
)
def test_responses_output_text_has_logprobs(srv: Any, ask: dict[str, Any]) -> None:
    srv.book.add(REPLY)
    response = srv.client().responses.create(model=MODEL, input="Hi", **ask)
    message = response.output[-1]
    assert message.type == "message"
    (part,) = message.content
    assert part.text == ANSWER
    _check_entries(part.logprobs, ANSWER, ask.get("top_logprobs", 0), srv.engine)
    assert response.output[0].type == "reasoning"  # whose tokens have none


def test_responses_stream_deltas_carry_their_logprobs(srv: Any) -> None:
    srv.book.add(REPLY)
    stream = srv.client().responses.create(
        model=MODEL,
        input="Hi",
        top_logprobs=2,
        include=["message.output_text.logprobs"],
        stream=True,
    )
    streamed: list[Any] = []
    done: list[Any] = []
    final: Any = None
    for event in stream:
        if event.type == "response.output_text.delta":
            assert "".join(lp.token for lp in event.logprobs) == event.delta
            streamed += event.logprobs
        elif event.type == "response.output_text.done":
            done = event.logprobs
        elif event.type == "response.completed":
            final = event.response
    assert "".join(lp.token for lp in streamed) == ANSWER
    assert [(lp.token, lp.logprob) for lp in done] == [(lp.token, lp.logprob) for lp in streamed]
    _check_entries(final.output[-1].content[0].logprobs, ANSWER, 2, srv.engine)


def test_a_character_split_across_ids_keeps_its_bytes(srv: Any) -> None:
    srv.book.add("<|channel|>final<|message|>A𝔘!<|return|>")
    completion = srv.client().chat.completions.create(**CHAT, logprobs=True)
    entries = completion.choices[0].logprobs.content
    assert b"".join(bytes(e.bytes) for e in entries).decode() == "A𝔘!"
    assert completion.choices[0].message.content == "A𝔘!"


def test_the_sdk_stream_helper_reads_logprobs(srv: Any) -> None:
    srv.book.add(REPLY)
    client: openai.OpenAI = srv.client()
    with client.chat.completions.stream(**CHAT, logprobs=True) as stream:
        final = stream.get_final_completion()
    assert "".join(e.token for e in final.choices[0].logprobs.content) == ANSWER


class _Refusing(ScriptedEngine):
    """Says it gives logprobs, then refuses them in generate() (a setup that cannot)."""

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Any:
        refuse_logprobs(params or SamplingParams(), self.name)
        return super().generate(prompt, params, constraint=constraint)


def test_an_engine_refusing_logprobs_in_generate_is_a_400_naming_it(make_server: Any) -> None:
    server = make_server(lambda book: _Refusing(book, name="picky"))
    client = server.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**CHAT, logprobs=True)
    assert "picky" in caught.value.message and caught.value.code == "unsupported_parameter"
    assert client.chat.completions.create(**CHAT).choices[0].message.content
