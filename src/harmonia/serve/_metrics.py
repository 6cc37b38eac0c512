"""Prometheus text metrics, kept by hand (no dependency): counters and a TTFT histogram."""

from __future__ import annotations

import bisect
import contextlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: The counters that are plain numbers (a snapshot's are added to them as they are).
_TOTALS = ("disconnects", "generated_tokens", "generation_seconds", "ttft_sum")


class Metrics:
    """Request, error, token and latency counters for ``GET /metrics``."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()
        self.errors: Counter[str] = Counter()
        self.disconnects = 0
        self.generated_tokens = 0
        self.generation_seconds = 0.0
        self.ttft_counts = [0] * (len(_TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0

    def request(self, path: str, status: int) -> None:
        self.requests[(path, status)] += 1
        if status >= 400:
            self.errors["http_" + str(status)] += 1

    def first_token(self, seconds: float) -> None:
        self.ttft_counts[bisect.bisect_left(_TTFT_BUCKETS, seconds)] += 1
        self.ttft_sum += seconds

    def generation(self, tokens: int, seconds: float) -> None:
        self.generated_tokens += tokens
        self.generation_seconds += seconds

    def snapshot(self) -> dict[str, Any]:
        """The counters as JSON-able data (what a worker shares with the others)."""
        return {
            "requests": [[path, status, n] for (path, status), n in self.requests.items()],
            "errors": dict(self.errors),
            "ttft_counts": list(self.ttft_counts),
            **{name: getattr(self, name) for name in _TOTALS},
        }

    def add(self, snapshot: dict[str, Any]) -> None:
        """Add another worker's :meth:`snapshot` to these counters."""
        for path, status, count in snapshot["requests"]:
            self.requests[(path, int(status))] += count
        self.errors.update(snapshot["errors"])
        for position, count in enumerate(snapshot["ttft_counts"]):
            self.ttft_counts[position] += count
        for name in _TOTALS:
            setattr(self, name, getattr(self, name) + snapshot[name])

    def render(
        self,
        gauges: dict[str, Callable[[], float]],
        counters: dict[str, Callable[[], float]] | None = None,
    ) -> str:
        lines = [
            "# HELP harmonia_requests_total HTTP requests by route and status.",
            "# TYPE harmonia_requests_total counter",
        ]
        for (path, status), count in sorted(self.requests.items()):
            lines.append(f'harmonia_requests_total{{path="{path}",status="{status}"}} {count}')
        lines += [
            "# HELP harmonia_errors_total Errors by kind.",
            "# TYPE harmonia_errors_total counter",
        ]
        for kind, count in sorted(self.errors.items()):
            lines.append(f'harmonia_errors_total{{kind="{kind}"}} {count}')
        lines += [
            "# TYPE harmonia_client_disconnects_total counter",
            f"harmonia_client_disconnects_total {self.disconnects}",
            "# HELP harmonia_generated_tokens_total Tokens the engine produced.",
            "# TYPE harmonia_generated_tokens_total counter",
            f"harmonia_generated_tokens_total {self.generated_tokens}",
            "# HELP harmonia_generation_seconds_total Time spent generating (for tokens/s).",
            "# TYPE harmonia_generation_seconds_total counter",
            f"harmonia_generation_seconds_total {self.generation_seconds:.6f}",
            "# HELP harmonia_time_to_first_token_seconds From admission to the first token.",
            "# TYPE harmonia_time_to_first_token_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip((*_TTFT_BUCKETS, float("inf")), self.ttft_counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'harmonia_time_to_first_token_seconds_bucket{{le="{le}"}} {cumulative}')
        lines.append(f"harmonia_time_to_first_token_seconds_sum {self.ttft_sum:.6f}")
        lines.append(f"harmonia_time_to_first_token_seconds_count {cumulative}")
        for name, read in (counters or {}).items():
            lines += [f"# TYPE {name} counter", f"{name} {read():g}"]
        for name, read in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name} {read():g}"]
        return "\n".join(lines) + "\n"


class SharedMetrics:
    """The metrics of every worker of one ``harmonia serve --workers N``, through a folder.

    Each worker writes its counters and gauges to its own file (at most once per
    ``interval_s``, and whenever it answers ``/metrics``); the worker that answers
    a scrape adds the others' files to its own numbers. Counters of a worker that
    died stay counted (a counter never goes down); its gauges are left out.
    """

    def __init__(self, folder: str, worker: int) -> None:
        self.folder = Path(folder)
        self.worker = worker
        self._file = self.folder / f"worker-{worker}.json"

    def publish(self, metrics: Metrics, gauges: dict[str, float]) -> None:
        data = {"pid": os.getpid(), "metrics": metrics.snapshot(), "gauges": gauges}
        temporary = self._file.with_suffix(".tmp")
        temporary.write_text(json.dumps(data))
        os.replace(temporary, self._file)  # a reader never sees half a file

    def combined(
        self, metrics: Metrics, gauges: dict[str, float], lowest: tuple[str, ...] = ()
    ) -> tuple[Metrics, dict[str, float]]:
        """Every worker's counters summed, and their gauges (summed; ``lowest``: the minimum)."""
        total = Metrics()
        total.add(metrics.snapshot())
        out = dict(gauges)
        for path in sorted(self.folder.glob("worker-*.json")):
            if path == self._file:
                continue
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                total.add(data["metrics"])
                if _alive(int(data["pid"])):
                    for name, value in data["gauges"].items():
                        if name in lowest:
                            out[name] = min(out.get(name, value), value)
                        else:
                            out[name] = out.get(name, 0) + value
        return total, out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
