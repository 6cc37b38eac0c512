"""Benchmark the python tool: kernel start time and call round trip.

Run it with the ``python`` extra installed, on Linux with bubblewrap::

    python benchmarks/bench_python_tool.py               # 5 starts, 200 calls
    python benchmarks/bench_python_tool.py --starts 3 --calls 50

It prints

* the sandbox probe (one ``bwrap`` start that imports ipykernel as the sandbox
  user; done once per process and cached),
* kernel start: ``PythonTool.start()`` of a fresh session until the kernel
  answers ``kernel_info`` (median and spread over ``--starts`` sessions),
* python call round trip: ``PythonTool.run`` of ``1 + 1`` and of ``print(1)``,
  from the call to the returned ToolOutput (p50, p90, p99),
* closing a session (kill, wait, delete its directories).

It refuses to run where the sandbox cannot start (the probe's reason is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from harmonia.tools.python import PythonTool, PythonToolConfig, sandbox_status


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(value: float) -> str:
    return f"{value * 1000:8.2f} ms"


async def _main(starts: int, calls: int, config: PythonToolConfig) -> None:
    started = time.perf_counter()
    status = sandbox_status(config)
    print(f"sandbox probe            {_ms(time.perf_counter() - started)}  ({status.reason[:60]})")
    if not status.ok:
        raise SystemExit(f"sandbox unavailable: {status.reason}")

    start_times, close_times = [], []
    for _ in range(starts):
        tool = PythonTool(config)
        t0 = time.perf_counter()
        await tool.start()
        start_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await tool.aclose()
        close_times.append(time.perf_counter() - t0)
    print(
        f"kernel start             {_ms(statistics.median(start_times))} median"
        f"  (min {_ms(min(start_times)).strip()}, max {_ms(max(start_times)).strip()},"
        f" n={starts}, sandboxed={tool.sandboxed})"
    )
    print(f"session close            {_ms(statistics.median(close_times))} median")

    async with PythonTool(config) as tool:
        for code in ("1 + 1", "print(1)"):
            for _ in range(5):  # warm-up: first executions compile IPython's machinery
                await tool.run(code)
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                await tool.run(code)
                times.append(time.perf_counter() - t0)
            print(
                f"round trip {code!r:13} {_ms(_quantile(times, 0.5))} p50"
                f"  {_ms(_quantile(times, 0.9)).strip()} p90"
                f"  {_ms(_quantile(times, 0.99)).strip()} p99  (n={calls})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(_main(args.starts, args.calls, PythonToolConfig()))


if __name__ == "__main__":
    main()
