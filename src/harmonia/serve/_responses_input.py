"""Responses input: ``input`` as items, earlier turns expanded, the prompt with their tokens.

``previous_response_id`` and ``item_reference`` are resolved from the store;
the prompt is rendered from the whole conversation, then the earlier turn's
sampled tokens are put back (:func:`splice`) so a continuation starts with
exactly the ids the engine has cached.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._runtime import new_id as _new_id
from ..openai_compat import responses_request_to_conversation
from ..vocabulary import CALL_ID as _CALL
from ..vocabulary import END_ID as _END
from ..vocabulary import MESSAGE_ID as _MESSAGE
from ..vocabulary import RETURN_ID as _RETURN
from ._agent_driver import Prepared
from ._compact import expand_compactions
from ._errors import APIError
from ._request import ResponsesBody
from ._service import Service, tool_choice_option
from ._store import StoredResponse

JsonDict = dict[str, Any]

#: Statuses of a response that has not finished.
RUNNING = ("queued", "in_progress")
#: The input items given an id (and a status) when they come without one, and its prefix.
_ID_PREFIXES = {"message": "msg", "function_call_output": "fco"}


def _items(raw: object) -> list[JsonDict]:
    """The request's ``input`` as items with ids (copies; the request is not changed)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    assert isinstance(raw, list)  # validated
    items: list[JsonDict] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise APIError(
                400,
                f"input[{index}] must be an object",
                param=f"input[{index}]",
                code="invalid_type",
            )
        item = copy.deepcopy(item)
        if "type" not in item and "role" in item:
            item["type"] = "message"
        if item.get("type") == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            part: JsonDict = {"type": kind, "text": item["content"]}
            if kind == "output_text":
                part["annotations"] = []
            item["content"] = [part]
        prefix = _ID_PREFIXES.get(str(item.get("type")))
        if prefix is not None:
            item.setdefault("id", _new_id(prefix))
            item.setdefault("status", "completed")
        items.append(item)
    return items


async def expand_context(
    service: Service,
    body: ResponsesBody,
    data: JsonDict,
    tenant: str,
    local: Mapping[str, StoredResponse] | None = None,
    settle: Callable[[StoredResponse], Awaitable[StoredResponse]] | None = None,
) -> tuple[list[JsonDict], StoredResponse | None]:
    """Earlier turns (``previous_response_id``, ``tenant``'s) then this input, references
    resolved. ``local``: a WebSocket connection's own responses, looked up first (they
    need not be stored). ``settle``: what a stored record that still runs really is (a
    dead replica's is ``failed``), so a continuation of it is not refused for good."""
    earlier: list[JsonDict] = []
    record = None
    if body.previous_response_id is not None:
        record = (local or {}).get(body.previous_response_id)
        if record is None:
            record = await get_record(
                service, body.previous_response_id, tenant, param="previous_response_id"
            )
            if settle is not None and record.status in RUNNING:
                record = await settle(record)
        if record.status in RUNNING:
            raise APIError(
                409,
                f"previous response {record.id!r} is still {record.status}; wait for it to "
                "finish (or cancel it) before continuing it",
                param="previous_response_id",
                code="response_in_progress",
            )
        earlier = record.context + list(record.response.get("output") or [])
    items = _items(data.get("input"))
    known = {item["id"]: item for item in earlier if isinstance(item.get("id"), str)}
    for index, item in enumerate(items):
        if item.get("type") == "item_reference":
            target = known.get(str(item.get("id")))
            if target is None:
                raise APIError(
                    404,
                    f"input[{index}]: item {item.get('id')!r} is not an item of the previous "
                    "response chain (item_reference resolves within previous_response_id's "
                    "conversation)",
                    param=f"input[{index}].id",
                    code="item_not_found",
                )
            items[index] = copy.deepcopy(target)
    return earlier + items, record


async def get_record(
    service: Service, response_id: str, tenant: str, param: str | None = None
) -> StoredResponse:
    """``tenant``'s response ``response_id``; another tenant's is the 404 of a missing one."""
    record = None if service.store is None else await service.store.get(response_id, tenant)
    if record is None:
        why = "" if service.store is not None else " (this server stores no responses)"
        raise APIError(
            404,
            f"no response with id {response_id!r}{why}",
            param=param,
            code="previous_response_not_found" if param else "response_not_found",
        )
    return record


def _strict(body: ResponsesBody) -> bool:
    # Responses function tools are strict unless they say otherwise (OpenAI's default).
    for tool in body.tools or ():
        if tool.get("type") == "function" and tool.get("strict", True) is not False:
            return True
    fmt = (body.text or {}).get("format") or {}
    return bool(fmt.get("type") == "json_schema" and fmt.get("strict") is True)


def prepare_responses(
    service: Service,
    request: JsonDict,
    body: ResponsesBody,
    previous: StoredResponse | None,
    tenant: str,
) -> Prepared:
    """The prompt (spliced onto ``previous``'s sampled ids) and constraint of a request;
    ``compaction`` items are expanded into what they stand for (``tenant``'s only)."""
    options = service.config.prompt_options_now()
    request = {**request, "input": expand_compactions(request["input"], service.sealer, tenant)}
    conversation = responses_request_to_conversation(request, options)
    prompt = service.render(conversation)
    if previous is not None:
        history = previous.context + list(previous.response["output"])
        earlier = {**request, "input": expand_compactions(history, service.sealer, tenant)}
        middle = service.render(responses_request_to_conversation(earlier, options))
        prompt = splice(prompt, middle, previous.prompt_tokens, previous.completion_tokens)
    choice = tool_choice_option(body.tool_choice) if body.tools else None
    return service.prepare(conversation, choice, _strict(body), prompt)


def splice(
    full: list[int], middle: list[int], prompt: Sequence[int], completion: Sequence[int]
) -> list[int]:
    """``full`` with the earlier turn's tokens put back exactly as the model sampled them.

    ``middle`` renders the earlier turn's conversation (its input and output)
    for the next turn: ``prompt``, the *canonical* rendering of ``completion``,
    then ``<|start|>assistant``. The model may have written its turn in a form
    the renderer does not produce (``<|channel|>commentary to=functions.f``,
    other JSON spacing tokens); continuing from the sampled ids keeps the
    engine's prefix cache valid. Nothing changes unless the earlier prompt is
    still a prefix, the new input only appends, and the canonical turn has as
    many messages as the sampled one (a CoT policy that dropped reasoning wins).
    """
    tail = len(middle) - 2  # without <|start|>assistant
    canonical = middle[len(prompt) : tail]
    if (
        tail < len(prompt)
        or not completion
        or completion[-1] not in (_RETURN, _CALL)
        or list(middle[: len(prompt)]) != list(prompt)
        or full[:tail] != middle[:tail]
        or canonical.count(_MESSAGE) != list(completion).count(_MESSAGE)
    ):
        return full
    # In history a final answer ends with <|end|>, not the <|return|> that stopped sampling.
    sampled = [*completion[:-1], _END if completion[-1] == _RETURN else completion[-1]]
    return [*prompt, *sampled, *full[tail:]]
