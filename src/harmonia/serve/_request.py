"""Reading a request body: size limit, JSON, and the fields the server itself uses.

The converters in ``harmonia.openai_compat`` check the conversation; this
module checks what decides how to run it (streaming, limits, sampling) with
lenient pydantic models (unknown fields pass) in strict mode (``"5"`` is not
an int), and turns every problem into a 400 in OpenAI's shape.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import ClientDisconnect, Request

from ._asgi import ClientGone
from ._errors import APIError

JsonDict = dict[str, Any]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(_Lenient):
    include_usage: bool | None = None


class ChatBody(_Lenient):
    """The Chat Completions fields the server reads (the converter reads the rest)."""

    model: str
    messages: list[Any] = Field(min_length=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class Reasoning(_Lenient):
    effort: str | None = None
    summary: str | None = None


class ResponsesBody(_Lenient):
    """The Responses fields the server reads."""

    model: str
    input: str | list[Any] | None = None
    instructions: str | None = None
    stream: bool | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    text: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None


async def read_json(request: Request, limit: int) -> JsonDict:
    """The body as a JSON object: 413 past ``limit`` bytes, 400 for anything not an object."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:  # half a body, then gone: nobody to answer, and no error
        raise ClientGone from None
    raw = b"".join(chunks)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise APIError(
            400,
            f"the request body is not valid JSON ({exc}); send a JSON object with "
            "Content-Type: application/json",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise APIError(
            400,
            f"the request body must be a JSON object, not {type(data).__name__}",
            code="invalid_json",
        )
    return data


def _check_engine(engine: object) -> None:
    """A 400 naming the engine when it cannot give log-probabilities."""
    if not getattr(engine, "supports_logprobs", False):
        raise APIError(
            400,
            f"this server's engine ({getattr(engine, 'name', 'unknown')}) cannot return "
            "log-probabilities; send the request without logprobs / top_logprobs",
            param="logprobs",
            code="unsupported_parameter",
        )


def chat_logprobs(engine: object, body: ChatBody) -> int | None:
    """The ``top_logprobs`` to ask the engine for (``None``: no log-probabilities).

    ``logprobs: true`` turns them on, ``top_logprobs`` (0 to 20) adds that many
    alternatives per token and, as with OpenAI, needs ``logprobs: true``. An
    engine that cannot give them is a 400 naming it, never ``logprobs: null``.
    """
    if not body.logprobs:
        if body.top_logprobs:
            raise APIError(
                400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value"
            )
        return None
    _check_engine(engine)
    return body.top_logprobs or 0


#: The ``include`` value that asks Responses for the output text's log-probabilities.
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def responses_logprobs(engine: object, body: ResponsesBody) -> int | None:
    """The ``top_logprobs`` to ask the engine for (``None``: no log-probabilities).

    ``include: ["message.output_text.logprobs"]`` or a ``top_logprobs`` above 0
    turns them on; an engine that cannot give them is a 400 naming it.
    """
    if LOGPROBS_INCLUDE not in (body.include or ()) and not body.top_logprobs:
        return None
    _check_engine(engine)
    return body.top_logprobs or 0


def validate(model: type[_Lenient], data: JsonDict) -> Any:
    """``model`` read from ``data``, or a 400 naming the first wrong field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _path(data, first["loc"])
        raise APIError(
            400,
            f"{param or 'body'}: {first['msg']}"
            + (f" ({len(exc.errors())} problems in all)" if len(exc.errors()) > 1 else ""),
            param=param,
            code={"missing": "missing_required_parameter", "too_short": "empty_array"}.get(
                first["type"], "invalid_type"
            ),
        ) from None


def _too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"the request body is larger than this server's limit of {limit} bytes",
        code="request_too_large",
    )


def _path(data: Any, loc: tuple[Any, ...]) -> str | None:
    """A JSON path such as ``tools[0].function`` for a pydantic error location.

    Only the parts that exist in the data are kept: pydantic adds the names of
    union members (``input.str``) that mean nothing to the client.
    """
    path = ""
    current = data
    for part in loc:
        if isinstance(part, int) and isinstance(current, list) and 0 <= part < len(current):
            path += f"[{part}]"
            current = current[part]
        elif isinstance(part, str) and isinstance(current, dict):
            path += ("." if path else "") + part
            if part not in current:
                break
            current = current[part]
        else:
            break
    return path or None
