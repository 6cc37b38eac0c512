"""``POST /v1/chat/completions``: streaming and not, on one code path."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from harmonia import EngineError

from .._runtime import SSE_DONE, sse_frame
from ..openai_compat import ChatCompletionStream, chat_request_to_conversation
from ._agent_driver import Prepared, Turn
from ._asgi import Disconnect, dumps, json_response, stream_failed
from ._errors import ServerShuttingDown, engine_error
from ._request import ChatBody, chat_logprobs, read_json, validate
from ._service import Service, log, log_diagnostics, tool_choice_option


def _strict(body: ChatBody) -> bool:
    """Whether the request asks for schema-exact output (strict tools or response format)."""
    for tool in body.tools or ():
        function = tool.get("function")
        if isinstance(function, dict) and function.get("strict") is True:
            return True
    fmt = body.response_format or {}
    schema = fmt.get("json_schema")
    return (
        fmt.get("type") == "json_schema"
        and isinstance(schema, dict)
        and schema.get("strict") is True
    )


def _prepare(service: Service, data: dict[str, Any], body: ChatBody) -> Prepared:
    conversation = chat_request_to_conversation(data, service.config.prompt_options_now())
    choice = tool_choice_option(body.tool_choice)
    if not body.tools:
        choice = None
    return service.prepare(conversation, choice, _strict(body))


async def chat_completions(service: Service, request: Request, request_id: str) -> Response:
    data = await read_json(request, service.config.max_body_bytes)
    body: ChatBody = validate(ChatBody, data)
    service.check_model(body.model)
    top_logprobs = chat_logprobs(service.engine, body)
    enc = service.enc
    params = service.sampling(
        body.max_completion_tokens or body.max_tokens, body.temperature, body.top_p, body.seed
    )
    params = replace(params, top_logprobs=top_logprobs)
    prepared = await asyncio.to_thread(_prepare, service, data, body)
    stream = ChatCompletionStream(
        enc,
        model=body.model,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        prompt_tokens=len(prepared.prompt),
        reasoning_field=service.config.chat_reasoning_field,
        logprobs=top_logprobs is not None,
    )
    disconnect = Disconnect(request.receive)
    turn = await disconnect.race_or_close(service.admit(prepared, params, stream))
    if body.stream:
        encode = _encoder(stream)
        return service.sse(_frames(turn, stream, encode, request_id), disconnect, turn, encode)
    await service.run_to_end(turn.events(), disconnect, turn, request_id)
    log_diagnostics(stream, request_id)
    return json_response(stream.completion)


def _encoder(stream: ChatCompletionStream) -> Callable[[list[dict[str, Any]]], bytes]:
    """A batch of chunks as SSE frames (pushed by the turn, or yielded by :func:`_frames`)."""
    encode_chunk = stream.encode_chunk  # text deltas from a template: one per streamed token

    def encode(chunks: list[dict[str, Any]]) -> bytes:
        if len(chunks) == 1:  # most batches: one streamed token's chunk
            return sse_frame(encode_chunk(chunks[0]))
        return b"".join([sse_frame(encode_chunk(chunk)) for chunk in chunks])

    return encode


async def _frames(
    turn: Turn,
    stream: ChatCompletionStream,
    encode: Callable[[list[dict[str, Any]]], bytes],
    request_id: str,
) -> AsyncIterator[bytes]:
    try:
        async for chunks in turn.events():
            yield encode(chunks)
    except EngineError as exc:
        # After the headers an error can only travel in the stream; the SDK raises APIError.
        log.error("[%s] engine failed mid-stream: %s", request_id, exc)
        error = engine_error(exc)
        stream_failed(error.status)
        yield sse_frame(error.json_bytes())
        return
    except ServerShuttingDown as exc:
        # Shutting down: the answer so far ends as cut off (finish_reason "length").
        log.warning("[%s] %s", request_id, exc.message)
        stream_failed(exc.status)
        yield b"".join(sse_frame(dumps(chunk)) for chunk in stream.finish(finished=False))
        yield SSE_DONE
        return
    log_diagnostics(stream, request_id)
    yield SSE_DONE
