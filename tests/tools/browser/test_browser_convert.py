"""PageConverter: conversions in worker processes, within a size and a time budget.

Budgets are exercised with jobs that never finish (``time.sleep``) and tiny
limits, so no test depends on how fast this machine converts.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import pytest

from harmonia import InputError, ToolError
from harmonia.tools.browser import PageConverter


def test_conversion_runs_in_another_process_and_the_worker_is_kept() -> None:
    pytest.importorskip("lxml", reason="HTML pages need the browser extra (lxml)")
    converter = PageConverter(workers=1, timeout=120)

    async def main() -> tuple[int, str, str]:
        pid = await converter.run(os.getpid)
        page = await converter.html_to_page(
            "<p>a <a href='/b'>b</a></p>", "https://e.org/", "", show_url=False
        )
        again = await converter.html_to_page("<p>c</p>", "https://e.org/", "T", show_url=True)
        return pid, page.text, again.text

    try:
        pid, text, again = asyncio.run(main())
    finally:
        converter.close()
    assert pid != os.getpid()
    assert (text, again) == ("a 【0†b】", "\nURL: https://e.org/\nc")
    assert converter.processes_started == 1


def test_a_conversion_past_its_time_is_stopped_and_the_loop_stays_free() -> None:
    converter = PageConverter(workers=1, timeout=1.0)
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.01)

    async def main() -> str:
        beat = asyncio.create_task(ticker())
        try:
            with pytest.raises(ToolError) as info:
                await converter.run(time.sleep, 3600)  # a page that never finishes
        finally:
            beat.cancel()
        converter.timeout = 120
        assert await converter.run(os.getpid) > 0  # a fresh worker takes over
        return str(info.value)

    try:
        message = asyncio.run(main())
    finally:
        converter.close()
    assert message == "the page took longer than 1 s to convert; not shown"
    assert len(ticks) > 5  # the event loop ran other work meanwhile
    assert converter.processes_started == 2  # the stuck worker was killed, not reused


def failure_then_a_fresh_worker(converter: PageConverter, work: Any, *args: Any) -> str:
    """The reply to ``work(*args)``, which fails in the worker; the next conversion must
    still run (on a fresh worker). The converter is closed after."""

    async def main() -> str:
        with pytest.raises(ToolError) as info:
            await converter.run(work, *args)
        assert await converter.run(os.getpid) > 0
        return str(info.value)

    try:
        return asyncio.run(main())
    finally:
        converter.close()


def test_a_worker_that_dies_is_a_reply_and_is_replaced() -> None:
    converter = PageConverter(workers=1, timeout=120)
    reply = failure_then_a_fresh_worker(converter, os._exit, 3)
    assert reply == "the page could not be converted (the converter stopped)"


def test_an_exception_in_the_worker_is_a_reply() -> None:
    converter = PageConverter(workers=0, timeout=120)

    async def main() -> None:
        with pytest.raises(ToolError, match="could not be converted: invalid literal"):
            await converter.run(int, "x")

    asyncio.run(main())


def test_thread_mode_abandons_a_conversion_past_its_time() -> None:
    converter = PageConverter(workers=0, timeout=0.2)

    async def main() -> None:
        with pytest.raises(ToolError, match="took longer than 0.2 s"):
            await converter.run(time.sleep, 2)

    asyncio.run(main())


def test_size_budget_refuses_before_any_work() -> None:
    converter = PageConverter(max_chars=10, workers=1)

    async def main() -> None:
        with pytest.raises(ToolError, match=r"too large to show \(11 characters"):
            await converter.html_to_page("x" * 11, "https://e.org/", "", show_url=False)

    asyncio.run(main())
    assert converter.processes_started == 0


def test_bad_budgets_and_closed_converter() -> None:
    with pytest.raises(InputError):
        PageConverter(max_chars=0)
    with pytest.raises(InputError):
        PageConverter(timeout=0)
    converter = PageConverter()
    converter.close()
    with pytest.raises(ToolError, match="closed"):
        asyncio.run(converter.run(os.getpid))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the memory limit is Linux's")
def test_a_conversion_over_the_memory_limit_is_a_reply() -> None:
    converter = PageConverter(workers=1, timeout=120, memory_limit=1 << 30)
    # 2 GiB in a worker limited to 1 GiB
    reply = failure_then_a_fresh_worker(converter, bytearray, 2 << 30)
    assert reply == "the page could not be converted: MemoryError"
