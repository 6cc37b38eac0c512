"""What the tests of the HTTP engines (llama.cpp, vLLM) share against their fake servers.

A plain module (imported as ``http_engine_support``: pytest puts this folder on
``sys.path``), because test files must not import ``conftest``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from harmonia.engines import FinishReason, SamplingParams

#: ``<|start|>system<|message|>-<|end|><|start|>assistant``: the prompt the tests send.
PROMPT = [200006, 17360, 200008, 12, 200007, 200006, 173781]


async def complete(engine: Any, params: SamplingParams | None = None, **kw: Any) -> Any:
    """One whole completion of :data:`PROMPT`; the engine is closed after it."""
    try:
        return await engine.generate(PROMPT, params, **kw).result()
    finally:
        await engine.aclose()


#: Only a guard against a hang, never what a test asserts: how long to wait for a fake
#: server to see the client leave. A correct engine makes the wait end at once.
HANG_GUARD = 30.0


async def cancel_after_three_ids(engine: Any, server: Any) -> tuple[Any, int]:
    """Cancel a long generation once three ids have come; the exchange and its count then.

    The count is how many SSE events the server had sent when ``cancel`` returned.
    Before the engine is closed, it waits until the server has seen the client
    leave: the cancel itself, not ``aclose``, must close the stream (a wait that
    runs into :data:`HANG_GUARD` fails the test).
    """
    generation = engine.generate(PROMPT, SamplingParams(max_tokens=500))
    seen = 0
    async for ids in generation:
        seen += len(ids)
        if seen >= 3:
            break
    await generation.cancel()
    (exchange,) = server.exchanges
    sent_at_cancel = len(exchange.sent)
    ids_at_cancel = len(generation.tokens)
    assert generation.finish is not None
    assert generation.finish.reason is FinishReason.CANCELLED
    left = await asyncio.to_thread(exchange.gone.wait, HANG_GUARD)
    assert left, "the server never saw the client leave after the cancel"
    assert len(generation.tokens) == ids_at_cancel, "ids came after the cancel"
    await engine.aclose()
    return exchange, sent_at_cancel
