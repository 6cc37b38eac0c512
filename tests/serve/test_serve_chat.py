"""Chat Completions through the official openai client against a real uvicorn server."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from serve_support import MODEL, closed_object, post, sse

from tool_examples import chat_weather_tool

THINK_THEN_ANSWER = (
    "<|channel|>analysis<|message|>The user greets me.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>"
)
WEATHER = chat_weather_tool(closed=True)


def call(name: str, args: str) -> str:
    return (
        "<|channel|>analysis<|message|>I need a tool.<|end|>"
        f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json"
        f"<|message|>{args}<|call|>"
    )


def user(text: str = "Hi") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_non_streaming_reasoning_and_answer_validate(srv):
    srv.book.add(THINK_THEN_ANSWER)
    raw = post(srv, "/chat/completions", {"model": MODEL, "messages": user()})
    assert raw.status_code == 200
    completion = ChatCompletion.model_validate(raw.json())
    assert completion.choices[0].message.content == "Hello there!"
    assert raw.json()["choices"][0]["message"]["reasoning_content"] == "The user greets me."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert raw.headers["x-request-id"]


def test_streaming_chunks_validate_and_add_up(srv):
    srv.book.add(THINK_THEN_ANSWER)
    body = {
        "model": MODEL,
        "messages": user(),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    payloads = sse(srv, "/chat/completions", body)
    assert payloads[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there!"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


def test_sdk_stream_helper_tool_call_then_result(srv):
    client = srv.client()
    srv.book.add(call("get_weather", '{"city":"Tokyo"}'))
    with client.chat.completions.stream(
        model=MODEL, messages=user("Weather in Tokyo?"), tools=[WEATHER]
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Tokyo"}
    # The tool result goes back; the model answers.
    srv.book.add("<|channel|>final<|message|>Sunny, 20 C.<|return|>")
    messages = [
        *user("Weather in Tokyo?"),
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tool_call.id, "content": '{"sky": "sunny"}'},
    ]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert answer.choices[0].message.content == "Sunny, 20 C."
    prompt = srv.engine.prompts[-1]
    rendered = srv.engine.generations[-1]
    assert rendered.usage.prompt_tokens == len(prompt)


def test_several_function_calls_in_a_chain(srv):
    client = srv.client()
    messages = user("Weather in Tokyo and Paris?")
    for city in ("Tokyo", "Paris"):
        srv.book.add(call("get_weather", json.dumps({"city": city})))
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
        (tool_call,) = reply.choices[0].message.tool_calls
        assert json.loads(tool_call.function.arguments) == {"city": city}
        messages += [
            reply.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": f"{city}: sunny"},
        ]
    srv.book.add("<|channel|>final<|message|>Both sunny.<|return|>")
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert final.choices[0].message.content == "Both sunny."
    # Both results reached the model's prompt.
    prompt_text = srv.engine.prompts[-1]
    from serve_support import ENC

    text = ENC.decode(list(prompt_text))
    assert "Tokyo: sunny" in text and "Paris: sunny" in text


def test_async_client_streams(srv):
    srv.book.add(THINK_THEN_ANSWER)

    async def run() -> str:
        async with srv.async_client() as client:
            stream = await client.chat.completions.create(model=MODEL, messages=user(), stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(run()) == "Hello there!"


STRICT_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": closed_object(n={"type": "integer"}),
    },
}


def test_strict_response_format_is_enforced(srv):
    client = srv.client()
    srv.book.add('<|channel|>final<|message|>{"n": 4}<|return|>')
    ok = client.chat.completions.create(
        model=MODEL, messages=user("2+2?"), response_format=STRICT_FORMAT
    )
    assert json.loads(ok.choices[0].message.content) == {"n": 4}
    # The same engine output that breaks the schema is refused by the mask, not passed on.
    srv.book.add("<|channel|>final<|message|>four<|return|>")
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=user("2+2?"), response_format=STRICT_FORMAT
        )
    assert caught.value.body["code"] == "engine_error"
    # Streaming, the refusal comes after the headers went out: an SSE error the SDK raises.
    srv.book.add("<|channel|>final<|message|>four<|return|>")
    with pytest.raises(openai.APIError) as caught:
        for _ in client.chat.completions.create(
            model=MODEL, messages=user("2+2?"), response_format=STRICT_FORMAT, stream=True
        ):
            pass
    assert "engine failed" in caught.value.message
    # Without strict nothing is enforced: the prompt only describes the format.
    srv.book.add("<|channel|>final<|message|>four<|return|>")
    loose = {**STRICT_FORMAT, "json_schema": {**STRICT_FORMAT["json_schema"], "strict": False}}
    reply = client.chat.completions.create(
        model=MODEL, messages=user("2+2?"), response_format=loose
    )
    assert reply.choices[0].message.content == "four"


def test_strict_function_arguments_are_enforced(srv):
    client = srv.client()
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    srv.book.add(call("get_weather", '{"city": "Oslo"}'))
    ok = client.chat.completions.create(model=MODEL, messages=user(), tools=[strict])
    assert json.loads(ok.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert srv.engine.constraints[-1] is not None
    # Arguments the schema forbids (an unknown key) are refused while sampling...
    srv.book.add(call("get_weather", '{"town": "Oslo"}'))
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=MODEL, messages=user(), tools=[strict])
    assert caught.value.body["code"] == "engine_error"
    # ...and pass as written when the tool is not strict (Chat's default).
    srv.book.add(call("get_weather", '{"town": "Oslo"}'))
    loose = client.chat.completions.create(model=MODEL, messages=user(), tools=[WEATHER])
    assert loose.choices[0].message.tool_calls[0].function.arguments == '{"town": "Oslo"}'
    assert srv.engine.constraints[-1] is None


def test_tool_choice_required_and_named_are_enforced(srv):
    client = srv.client()
    srv.book.add("<|channel|>final<|message|>No tool needed.<|return|>")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model=MODEL, messages=user(), tools=[WEATHER], tool_choice="required"
        )
    srv.book.add(call("get_weather", '{"city":"Oslo"}'))
    named = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(
        model=MODEL, messages=user(), tools=[WEATHER], tool_choice=named
    )
    assert reply.choices[0].finish_reason == "tool_calls"
    # "none" declares no tools at all: the prompt has no functions namespace.
    srv.book.add("<|channel|>final<|message|>Fine.<|return|>")
    client.chat.completions.create(
        model=MODEL, messages=user(), tools=[WEATHER], tool_choice="none"
    )
    from serve_support import ENC

    assert "get_weather" not in ENC.decode(list(srv.engine.prompts[-1]))


def test_max_tokens_cuts_and_says_length(srv):
    srv.book.add(THINK_THEN_ANSWER)
    reply = srv.client().chat.completions.create(model=MODEL, messages=user(), max_tokens=3)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 3


def test_reasoning_field_is_configurable(make_server):
    server = make_server(chat_reasoning_field="reasoning")
    server.book.add(THINK_THEN_ANSWER)
    message = post(server, "/chat/completions", {"model": MODEL, "messages": user()}).json()
    message = message["choices"][0]["message"]
    assert message["reasoning"] == "The user greets me." and "reasoning_content" not in message
