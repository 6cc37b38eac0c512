"""Frames pushed to an SSE answer from another task (``SSEResponse.pusher``).

A push writes at once or declines; a write that the server's flow control
suspends finishes in a task of its own, and every later write (pushed or
iterated) waits for it, so the client sees the frames in the order they were
made. Driven with a stand-in ``send`` whose suspension the test controls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from harmonia.serve._asgi import Disconnect, SSEResponse


class Client:
    """An ASGI ``send`` that records bodies; while ``paused`` each send waits."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paused: asyncio.Future[None] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        if self.paused is not None:
            await self.paused
        if message["type"] == "http.response.body" and message.get("body"):
            self.bodies.append(message["body"])


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


def _answer(frames: AsyncIterator[bytes]) -> SSEResponse:
    return SSEResponse(frames, Disconnect(_never), send_timeout_s=30, ping_interval_s=30)


def test_a_push_writes_at_once_and_declines_while_a_write_waits() -> None:
    async def main() -> tuple[list[bool], list[bytes]]:
        client = Client()
        release: asyncio.Event = asyncio.Event()

        async def frames() -> AsyncIterator[bytes]:
            await release.wait()
            yield b"iterated\n"

        answer = _answer(frames())
        pushes: list[bool] = []
        opened: list[bool] = []
        answer.on_streaming = opened.append
        push = answer.pusher(lambda events: "".join(events).encode())
        pushes.append(push(["before"]))  # not streaming yet: declined
        running = asyncio.ensure_future(answer({"type": "http"}, _never, client.send))
        await asyncio.sleep(0)
        pushes.append(push(["one\n"]))  # written in this call
        written_at_once = list(client.bodies)
        client.paused = asyncio.get_running_loop().create_future()
        pushes.append(push(["two\n"]))  # suspended: finishes in a task
        pushes.append(push(["three\n"]))  # an earlier write waits: declined
        release.set()  # the iterator's frame waits for the suspended push
        await asyncio.sleep(0)
        assert client.bodies == written_at_once
        client.paused.set_result(None)
        client.paused = None
        await running
        assert opened == [True, False]
        assert written_at_once == [b"one\n"]
        return pushes, client.bodies

    pushes, bodies = asyncio.run(main())
    assert pushes == [False, True, True, False]
    assert bodies == [b"one\n", b"two\n", b"iterated\n"]
