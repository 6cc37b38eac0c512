"""What the tests of the HTTP engines (llama.cpp, vLLM) share against their fake servers.

A plain module (imported as ``http_engine_support``: pytest puts this folder on
``sys.path``), because test files must not import ``conftest``.
"""

from __future__ import annotations

import asyncio
import time
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


async def cancel_after_three_ids(engine: Any) -> float:
    """Cancel a long generation once three ids have come; the ``perf_counter`` of the cancel.

    It then waits a moment before closing the engine, so that a server that kept
    sending after the cancel would be seen to.
    """
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
