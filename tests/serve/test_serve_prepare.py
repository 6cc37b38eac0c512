"""Where a request is made ready: a small one on the event loop, the rest in a thread.

A render of a few hundred ids costs less than the hop to a worker thread and
back, and when hundreds of requests come at once each waited for a free
thread; a long conversation or a grammar to build must not hold up every
stream. ``Service.render`` is watched: it runs on the loop's thread exactly
when the request was light.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from serve_support import MODEL, post

from harmonia.serve._service import INLINE_PREPARE_BYTES, Service
from tool_examples import chat_weather_tool

ANSWER = "<|channel|>final<|message|>Done.<|return|>"
LONG = "word " * (INLINE_PREPARE_BYTES // 5 + 1)


@pytest.fixture
def on_loop(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each render ran on the event loop's thread."""
    seen: list[bool] = []
    render = Service.render

    def watched(self: Service, conversation: Any) -> list[int]:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:  # a worker thread has no running loop
            seen.append(False)
        return render(self, conversation)

    monkeypatch.setattr(Service, "render", watched)
    return seen


def _chat(srv: Any, given: Any, **extra: Any) -> None:
    srv.book.add(ANSWER)
    body = {"model": MODEL, "messages": [{"role": "user", "content": given}], **extra}
    assert post(srv, "/chat/completions", body).status_code == 200


def _responses(srv: Any, given: Any, **extra: Any) -> None:
    srv.book.add(ANSWER)
    body = {"model": MODEL, "input": given, "store": False, **extra}
    assert post(srv, "/responses", body).status_code == 200


def test_a_small_chat_request_is_made_ready_on_the_loop(srv: Any, on_loop: list[bool]) -> None:
    _chat(srv, "Hi")
    _chat(srv, LONG)
    _chat(srv, "Hi", tools=[chat_weather_tool()])
    assert on_loop == [True, False, False]


def test_a_small_responses_request_is_made_ready_on_the_loop(srv: Any, on_loop: list[bool]) -> None:
    _responses(srv, "Hi")
    _responses(srv, LONG)
    _responses(srv, [{"role": "user", "content": "Hi"}])  # items: not judged, in a thread
    _responses(srv, "Hi", text={"format": {"type": "json_schema", "name": "x", "schema": {}}})
    assert on_loop == [True, False, False, False]
