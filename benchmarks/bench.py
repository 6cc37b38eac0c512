"""Benchmark harmonia against the reference (``openai_harmony`` 0.0.8), side by side.

Run it with ``make bench`` (installs the ``bench`` extra, then runs this script)
or directly::

    python benchmarks/bench.py                  # full run, under ~2 minutes
    python benchmarks/bench.py --quick          # ~20 seconds, rougher numbers
    python benchmarks/bench.py --json out.json  # also save every figure as JSON
    python benchmarks/bench.py --only render-agent,parse --profile

Both libraries run in the same process, on inputs built by the same code
(``workloads.py``), and their repetitions are interleaved so machine noise hits
both alike. Each workload reports the median and the 10th/90th percentiles of
its samples, and the ratio ``reference median / harmonia median`` (higher means
harmonia is faster); the goal table at the end prints PASS/FAIL per goal.

Before timing, the outputs of both libraries are compared (token ids for the
renders, ``to_dict()`` of the parsed messages for the parsers); a difference is
reported as a loud MISMATCH, and the workload is still timed.

The reference is run offline: harmonia writes ``o200k_base.tiktoken`` into a
temporary directory and ``TIKTOKEN_ENCODINGS_BASE`` points there before
``openai_harmony`` is imported. Without ``openai_harmony`` (or ``tiktoken``) the
script times harmonia alone and shows the ratios as n/a. A workload that raises
prints the error and the run goes on.

``--profile`` replaces the timing by a cProfile of harmonia's side of each
workload (top functions by own time).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import importlib
import io
import json
import math
import operator
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import workloads

try:
    import harmonia
except ImportError:  # running from a plain checkout: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import harmonia

from harmonia._tokenizer import engines, vocab_file

N_ORDINARY = 199_998  # ids from here on are special tokens

HARMONIA = "harmonia"  # the default engine ("auto"), as users get it
HARMONIA_PY = "harm-py"  # engine="python": the pure-Python tier on its own
HARMONIA_QT = "harm-qt"  # engine="quicktok": quicktok built at load
HARMONIA_NC = "harm-nc"  # the default engine, every render cache cleared before each call
HARMONIA_EV = "harm-ev"  # streaming through the event API (feed) instead of the properties
FLOOR = "floor"  # the least any implementation must do for the same output (see floor_*)
REFERENCE = "reference"
QUICKTOK = "quicktok"
TIKTOKEN = "tiktoken"

# -- run settings -----------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """How long to measure: per workload, and per sample."""

    seconds: float  # measuring time per in-process workload, all sides together
    min_reps: int  # at least this many samples per side, whatever the time
    max_reps: int
    sample_seconds: float  # target duration of one sample (calls are repeated to reach it)
    load_runs: int  # fresh subprocesses per side for the load workload


FULL = Budget(seconds=13.0, min_reps=15, max_reps=20_000, sample_seconds=0.003, load_runs=7)
QUICK = Budget(seconds=2.0, min_reps=5, max_reps=20_000, sample_seconds=0.002, load_runs=3)


# -- statistics ---------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    median: float
    p10: float
    p90: float
    n: int
    number: int = 1  # calls per sample

    @classmethod
    def of(cls, samples: Sequence[float], number: int = 1, per: int = 1) -> Stats:
        values = sorted(s / per for s in samples)
        return cls(
            _quantile(values, 0.5),
            _quantile(values, 0.1),
            _quantile(values, 0.9),
            len(values),
            number,
        )


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def format_seconds(value: float) -> str:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:7.2f} {unit}"
    return f"{value / 1e-9:7.1f} ns"


def format_mib(value: float) -> str:
    return f"{value:7.1f} MiB"


# -- workloads ----------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    title: str
    per: int = 1  # report time per this many units (stream: per token)
    unit: str = "call"
    fmt: Callable[[float], str] = format_seconds
    cases: dict[str, Callable[[], object]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    results: dict[str, Stats] = field(default_factory=dict)

    def attempt(self, label: str, build: Callable[..., Callable[[], object]], *args: Any) -> None:
        """Build one side's timed callable; an exception disables that side only."""
        try:
            self.cases[label] = build(*args)
        except Exception as exc:
            self.errors[label] = describe_error(exc)

    def ratio(self, numerator: str, denominator: str) -> float | None:
        num, den = self.results.get(numerator), self.results.get(denominator)
        if num is None or den is None or den.median <= 0:
            return None
        return num.median / den.median

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "unit": self.unit,
            "per": self.per,
            "notes": self.notes,
            "errors": self.errors,
            "mismatches": self.mismatches,
            "results": {k: vars(v) for k, v in self.results.items()},
        }


def describe_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass
class Libraries:
    """Everything loaded once: the two libraries' encodings and the raw BPE engines."""

    harmonia_enc: Any
    harmonia_py_enc: Any = None
    harmonia_nc_enc: Any = None
    reference: ModuleType | None = None
    reference_enc: Any = None
    quicktok_enc: Any = None
    tiktoken_enc: Any = None
    missing: dict[str, str] = field(default_factory=dict)

    def sides(self) -> list[tuple[str, ModuleType, Any]]:
        sides: list[tuple[str, ModuleType, Any]] = [(HARMONIA, harmonia, self.harmonia_enc)]
        if self.reference is not None:
            sides.append((REFERENCE, self.reference, self.reference_enc))
        return sides

    def render_sides(self) -> list[tuple[str, ModuleType, Any]]:
        """Render workloads also time the pure-Python tier, which ``auto`` starts with,
        and renders that find nothing in harmonia's render caches."""
        return [
            *self.sides(),
            (HARMONIA_PY, harmonia, self.harmonia_py_enc),
            (HARMONIA_NC, harmonia, self.harmonia_nc_enc),
        ]


def load_libraries() -> Libraries:
    name = harmonia.HarmonyEncodingName.HARMONY_GPT_OSS
    libs = Libraries(harmonia.load_harmony_encoding(name))
    libs.harmonia_py_enc = harmonia.load_harmony_encoding(name, engine="python")
    # Its own renderer (so clearing its caches leaves the default's alone), same engine.
    libs.harmonia_nc_enc = type(libs.harmonia_enc)(name, libs.harmonia_enc._tokenizer)
    try:
        ref = importlib.import_module("openai_harmony")
        libs.reference_enc = ref.load_harmony_encoding(ref.HarmonyEncodingName.HARMONY_GPT_OSS)
        libs.reference = ref
    except ImportError:
        libs.missing[REFERENCE] = "openai_harmony is not installed (pip install -e '.[bench]')"
    except Exception as exc:
        libs.missing[REFERENCE] = f"openai_harmony failed to load: {describe_error(exc)}"
    try:
        import quicktok

        libs.quicktok_enc = quicktok.get_encoding("o200k_base")
    except Exception as exc:
        libs.missing[QUICKTOK] = describe_error(exc)
    try:
        libs.tiktoken_enc = build_tiktoken()
    except ImportError:
        libs.missing[TIKTOKEN] = "tiktoken is not installed"
    except Exception as exc:
        libs.missing[TIKTOKEN] = describe_error(exc)
    return libs


def build_tiktoken() -> Any:
    """tiktoken's o200k_base, built offline from harmonia's bundled ranks."""
    import tiktoken

    return tiktoken.Encoding(
        name="o200k_base_offline",
        pat_str=engines.O200K_PATTERN,
        mergeable_ranks={b: i for i, b in enumerate(vocab_file.ordinary_ranks())},
        special_tokens={},
    )


def normalise(value: Any) -> Any:
    """JSON round trip, dropping ``None`` values, so both libraries' dicts compare."""

    def drop_none(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: drop_none(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [drop_none(x) for x in v]
        return v

    return drop_none(json.loads(json.dumps(value)))


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"first difference at index {i}: {x!r:.200} vs {y!r:.200}"
    return f"lengths differ: {len(a)} vs {len(b)}"


def compare(wl: Workload, outputs: dict[str, Any], what: str, a: str, b: str) -> None:
    if a not in outputs or b not in outputs:
        return
    if outputs[a] == outputs[b]:
        wl.notes.append(f"verified: {a} and {b} give identical {what}")
    else:
        detail = first_difference(outputs[a], outputs[b])
        wl.mismatches.append(f"{a} vs {b}: {what} differ ({detail})")


# renders


def render_case(
    mod: ModuleType,
    enc: Any,
    build: Callable[[ModuleType], Any],
    outputs: dict[str, Any],
    label: str,
) -> Callable[[], object]:
    conversation, role = build(mod), mod.Role.ASSISTANT
    outputs[label] = enc.render_conversation_for_completion(conversation, role)
    if label == HARMONIA_NC:
        clear = enc._renderer.clear_caches

        def run_uncached() -> object:
            clear()
            return enc.render_conversation_for_completion(conversation, role)

        return run_uncached

    def run() -> object:
        return enc.render_conversation_for_completion(conversation, role)

    return run


def text_runs(enc: Any, tokens: Sequence[int]) -> list[str]:
    """The ordinary text of rendered ids: each run between two special tokens, decoded."""
    table = enc.tokenizer.token_bytes_table
    runs: list[str] = []
    run: list[int] = []
    for t in [*tokens, N_ORDINARY]:
        if t < N_ORDINARY:
            run.append(t)
        elif run:
            runs.append(b"".join(table[i] for i in run).decode())
            run = []
    return runs


def floor_render_case(
    libs: Libraries, tokens: Sequence[int], outputs: dict[str, Any], label: str
) -> Callable[[], object]:
    """quicktok's ``encode_ordinary`` of every text run of the render (the BPE work alone).

    Any renderer must BPE-encode these texts; the format tokens between them are
    constants. A cold render (no caches) cannot be much faster than this.
    """
    if libs.quicktok_enc is None:
        raise RuntimeError(libs.missing.get(QUICKTOK, "quicktok is not available"))
    runs = text_runs(libs.harmonia_enc, tokens)
    encode = libs.quicktok_enc.encode_ordinary
    outputs[label] = [t for run in runs for t in encode(run)]

    def run() -> object:
        return [encode(text) for text in runs]

    return run


def prepare_render(
    libs: Libraries, name: str, title: str, build: Callable[[ModuleType], Any]
) -> tuple[Workload, dict[str, Any]]:
    wl = Workload(name, title)
    outputs: dict[str, Any] = {}
    for label, mod, enc in libs.render_sides():
        wl.attempt(label, render_case, mod, enc, build, outputs, label)
    sample = next(iter(outputs.values()), None)
    if sample is not None:
        wl.notes.append(f"{len(sample)} tokens")
        wl.attempt(FLOOR, floor_render_case, libs, sample, outputs, FLOOR)
        if FLOOR in outputs:
            body = [t for t in sample if t < N_ORDINARY]
            compare(wl, {HARMONIA: body, FLOOR: outputs[FLOOR]}, "text ids", HARMONIA, FLOOR)
    compare(wl, outputs, "token ids", HARMONIA, REFERENCE)
    compare(wl, outputs, "token ids", HARMONIA_PY, REFERENCE)
    compare(wl, outputs, "token ids", HARMONIA_NC, REFERENCE)
    return wl, outputs


def prepare_weather(libs: Libraries) -> Workload:
    title = "render the guide's weather-tool conversation (render_conversation_for_completion)"
    return prepare_render(libs, "render-weather", title, workloads.weather_conversation)[0]


def prepare_agent(libs: Libraries) -> Workload:
    title = "render a 20-turn agent conversation with tool calls"
    return prepare_render(libs, "render-agent", title, workloads.agent_conversation)[0]


def prepare_big(libs: Libraries) -> Workload:
    text = workloads.big_text()
    title = f"render one {len(text.encode()) // 1000} KB user message; raw BPE engines on the text"
    wl, outputs = prepare_render(
        libs, "render-120k", title, lambda m: workloads.big_message_conversation(m, text)
    )
    wl.notes.append(f"{len(text):,} characters, {len(text.encode()):,} UTF-8 bytes")
    for label, enc in ((QUICKTOK, libs.quicktok_enc), (TIKTOKEN, libs.tiktoken_enc)):
        if enc is None:
            wl.errors[label] = libs.missing.get(label, "not available")
            continue
        wl.attempt(label, encode_case, enc, text, outputs, label)
    if HARMONIA in outputs:
        outputs["harmonia-body"] = outputs[HARMONIA][3:-3]  # strip the message's format tokens
        compare(wl, outputs, "text token ids", "harmonia-body", QUICKTOK)
    compare(wl, outputs, "token ids", QUICKTOK, TIKTOKEN)
    return wl


def encode_case(enc: Any, text: str, outputs: dict[str, Any], label: str) -> Callable[[], object]:
    outputs[label] = enc.encode_ordinary(text)

    def run() -> object:
        return enc.encode_ordinary(text)

    return run


# parsing


def completion_tokens(libs: Libraries, wl: Workload) -> list[int]:
    """The completion rendered by each library; the reference's copy is used when it exists."""
    rendered: dict[str, Any] = {}
    for label, mod, enc in libs.sides():
        try:
            rendered[label] = workloads.completion_tokens(mod, enc)
        except Exception as exc:
            wl.errors[f"{label} (building input)"] = describe_error(exc)
    compare(wl, rendered, "completion token ids", HARMONIA, REFERENCE)
    tokens: list[int] | None = rendered.get(REFERENCE, rendered.get(HARMONIA))
    if tokens is None:
        raise RuntimeError("no library could render the completion")
    wl.notes.insert(
        0, f"{len(tokens)} tokens, {len(workloads.completion_messages(harmonia))} messages"
    )
    return tokens


def parse_case(
    mod: ModuleType, enc: Any, tokens: list[int], outputs: dict[str, Any], label: str
) -> Callable[[], object]:
    role = mod.Role.ASSISTANT
    messages = enc.parse_messages_from_completion_tokens(tokens, role)
    outputs[label] = normalise([m.to_dict() for m in messages])

    def run() -> object:
        return enc.parse_messages_from_completion_tokens(tokens, role)

    return run


def floor_parse_case(enc: Any, tokens: list[int]) -> Callable[[], object]:
    """Every token's bytes looked up, joined and decoded in one call each.

    Any parser that returns the text must at least do this; the special tokens
    are left in (finding them is part of what a parser adds).
    """
    table = enc.tokenizer.token_bytes_table
    get = operator.itemgetter(*tokens)

    def run() -> object:
        return b"".join(get(table)).decode("utf-8", "replace")

    return run


def prepare_parse(libs: Libraries) -> Workload:
    wl = Workload("parse", "batch-parse a completion (parse_messages_from_completion_tokens)")
    tokens = completion_tokens(libs, wl)
    outputs: dict[str, Any] = {}
    for label, mod, enc in libs.sides():
        wl.attempt(label, parse_case, mod, enc, tokens, outputs, label)
    compare(wl, outputs, "parsed messages", HARMONIA, REFERENCE)
    wl.attempt(FLOOR, floor_parse_case, libs.harmonia_enc, tokens)
    return wl


def stream_trace(mod: ModuleType, enc: Any, tokens: list[int]) -> Any:
    parser = mod.StreamableParser(enc, mod.Role.ASSISTANT)
    deltas = []
    for token in tokens:
        parser.process(token)
        deltas.append(parser.last_content_delta)
    return {"deltas": deltas, "messages": normalise([m.to_dict() for m in parser.messages])}


def stream_case(
    mod: ModuleType, enc: Any, tokens: list[int], outputs: dict[str, Any], label: str
) -> Callable[[], object]:
    outputs[label] = stream_trace(mod, enc, tokens)
    parser_class, role = mod.StreamableParser, mod.Role.ASSISTANT

    def run() -> object:
        parser = parser_class(enc, role)
        process = parser.process
        for token in tokens:
            process(token)
            _ = parser.last_content_delta
        return parser

    return run


def events_trace(enc: Any, tokens: list[int]) -> Any:
    """What the event API gives, in the shape of :func:`stream_trace` (deltas per token)."""
    parser = harmonia.StreamableParser(enc, harmonia.Role.ASSISTANT)
    deltas = []
    for token in tokens:
        texts = [e.text for e in parser.feed(token) if isinstance(e, harmonia.ContentDelta)]
        deltas.append("".join(texts) if texts else None)
    return {"deltas": deltas, "messages": normalise([m.to_dict() for m in parser.messages])}


def events_case(enc: Any, tokens: list[int], outputs: dict[str, Any]) -> Callable[[], object]:
    outputs[HARMONIA_EV] = events_trace(enc, tokens)
    parser_class, role = harmonia.StreamableParser, harmonia.Role.ASSISTANT

    def run() -> object:
        parser = parser_class(enc, role)
        feed = parser.feed
        for token in tokens:
            feed(token)
        return parser

    return run


class _FloorParser:
    """The least a per-token Python API can do: a call, a table lookup, an append."""

    __slots__ = ("pieces", "table")

    def __init__(self, table: list[bytes]) -> None:
        self.table = table
        self.pieces: list[bytes] = []

    def process(self, token: int) -> None:
        self.pieces.append(self.table[token])


def floor_stream_case(enc: Any, tokens: list[int]) -> Callable[[], object]:
    table = enc.tokenizer.token_bytes_table

    def run() -> object:
        parser = _FloorParser(table)
        process = parser.process
        for token in tokens:
            process(token)
            _ = parser.pieces
        return parser

    return run


def prepare_stream(libs: Libraries) -> Workload:
    title = "stream the completion token by token (StreamableParser.process + last_content_delta)"
    wl = Workload("stream", title, unit="token")
    tokens = completion_tokens(libs, wl)
    wl.per = len(tokens)
    outputs: dict[str, Any] = {}
    for label, mod, enc in libs.sides():
        wl.attempt(label, stream_case, mod, enc, tokens, outputs, label)
    wl.attempt(HARMONIA_EV, events_case, libs.harmonia_enc, tokens, outputs)
    for key in ("deltas", "messages"):
        parts = {label: out[key] for label, out in outputs.items()}
        compare(wl, parts, f"streamed {key}", HARMONIA, REFERENCE)
        compare(wl, parts, f"streamed {key}", HARMONIA_EV, HARMONIA)
    wl.attempt(FLOOR, floor_stream_case, libs.harmonia_enc, tokens)
    return wl


# -- timing ---------------------------------------------------------------------------


def time_sample(fn: Callable[[], object], number: int) -> float:
    """Seconds per call over ``number`` back-to-back calls, garbage collector paused."""
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number
    finally:
        gc.enable()


def calibrate(fn: Callable[[], object], target: float) -> int:
    """Calls per sample so that one sample lasts about ``target`` seconds."""
    fn()  # warm-up
    single = min(time_sample(fn, 1) for _ in range(3))
    return max(1, min(100_000, round(target / max(single, 1e-8))))


def measure(wl: Workload, budget: Budget) -> None:
    """Interleave the sides' samples (order flipped every round) until the budget is spent."""
    labels = list(wl.cases)
    if not labels:
        return
    gc.collect()
    numbers = {label: calibrate(wl.cases[label], budget.sample_seconds) for label in labels}
    samples: dict[str, list[float]] = {label: [] for label in labels}
    deadline = time.perf_counter() + budget.seconds
    rep = 0
    while rep < budget.min_reps or (rep < budget.max_reps and time.perf_counter() < deadline):
        for label in labels if rep % 2 == 0 else labels[::-1]:
            samples[label].append(time_sample(wl.cases[label], numbers[label]))
        rep += 1
    for label in labels:
        wl.results[label] = Stats.of(samples[label], numbers[label], wl.per)


# -- load: fresh subprocesses ------------------------------------------------------------

# Memory comes from /proc/self/status: VmRSS now, VmHWM the peak of this process
# image. ``ru_maxrss`` is only the fallback (elsewhere than Linux): on Linux it
# carries over the parent's peak across fork + exec, so it would report the
# benchmark process's own size.
MEMORY_PROBE = r"""
import resource, sys
def memory_kib():
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak // 1024 if sys.platform == "darwin" else peak
        return peak, peak
"""

LOAD_SCRIPT = (
    MEMORY_PROBE
    + r"""
import json, time
text = "Hi"
if sys.argv[2] == "big":
    import workloads
    text = workloads.big_text()
start = time.perf_counter()
h = __import__(sys.argv[1])
enc = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
conv = h.Conversation.from_messages([h.Message.from_role_and_content(h.Role.USER, text)])
tokens = enc.render_conversation_for_completion(conv, h.Role.ASSISTANT)
seconds = time.perf_counter() - start
rss, peak = memory_kib()
print(json.dumps({"seconds": seconds, "rss_kib": rss, "peak_kib": peak, "tokens": tokens}))
"""
)

BASELINE_SCRIPT = (
    MEMORY_PROBE
    + r"""
import json
rss, peak = memory_kib()
print(json.dumps({"rss_kib": rss, "peak_kib": peak}))
"""
)


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(harmonia.__file__).resolve().parent.parent)
    here = str(Path(__file__).resolve().parent)  # for ``import workloads``
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, here, env.get("PYTHONPATH")) if p)
    return env


#: label -> (module, extra environment) for the fresh-process workloads
LOAD_SIDES: dict[str, tuple[str, dict[str, str]]] = {
    HARMONIA: ("harmonia", {}),
    HARMONIA_QT: ("harmonia", {"HARMONIA_BPE_ENGINE": "quicktok"}),
    REFERENCE: ("openai_harmony", {}),
}


def run_load(module: str, env: dict[str, str], text: str = "tiny") -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, module, text],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise RuntimeError(lines[-1])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


def run_fresh_processes(
    wl: Workload, libs: Libraries, budget: Budget, text: str
) -> dict[str, list[dict[str, Any]]]:
    """``budget.load_runs`` fresh processes per side, the sides' order flipped every round."""
    sides = {k: v for k, v in LOAD_SIDES.items() if k != REFERENCE or libs.reference is not None}
    env = subprocess_env()
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in sides}
    labels = list(sides)
    for rep in range(budget.load_runs):
        for label in labels if rep % 2 == 0 else labels[::-1]:
            if label in wl.errors:
                continue
            module, extra = sides[label]
            try:
                runs[label].append(run_load(module, {**env, **extra}, text))
            except Exception as exc:
                wl.errors[label] = describe_error(exc)
    return runs


def measure_load(libs: Libraries, budget: Budget) -> tuple[Workload, Workload, Workload]:
    title = "fresh process: import + load_harmony_encoding + first render of a tiny conversation"
    wl = Workload("load", title)
    mem = Workload("memory", "RSS of that process after the first render", unit="process")
    mem.fmt = format_mib
    runs = run_fresh_processes(wl, libs, budget, "tiny")
    summarise_load(wl, mem, runs)
    cold = Workload("cold-120k", "fresh process: import + load + render the 120 KB message")
    big_runs = run_fresh_processes(cold, libs, budget, "big")
    summarise_load(cold, Workload("unused", ""), big_runs)
    baseline = subprocess.run(
        [sys.executable, "-c", BASELINE_SCRIPT],
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )
    with contextlib.suppress(ValueError, IndexError, KeyError):
        base = json.loads(baseline.stdout.strip().splitlines()[-1])["rss_kib"]
        mem.notes.append(f"a bare Python interpreter: RSS {base / 1024:.1f} MiB")
    return wl, mem, cold


def summarise_load(wl: Workload, mem: Workload, runs: dict[str, list[dict[str, Any]]]) -> None:
    for label, results in runs.items():
        if not results:
            continue
        wl.results[label] = Stats.of([r["seconds"] for r in results])
        walls = Stats.of([r["wall"] for r in results])
        wl.notes.append(f"{label}: wall time incl. interpreter start, median {walls.median:.3f} s")
        mem.results[label] = Stats.of([r["rss_kib"] / 1024 for r in results])
        peak = Stats.of([r["peak_kib"] / 1024 for r in results]).median
        mem.notes.append(f"{label}: peak RSS during start-up (VmHWM), median {peak:.1f} MiB")
    tokens = {label: results[0]["tokens"] for label, results in runs.items() if results}
    compare(wl, tokens, "first-render token ids", HARMONIA, REFERENCE)
    compare(wl, tokens, "first-render token ids", HARMONIA_QT, REFERENCE)


# -- goals --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    workload: str
    description: str
    numerator: str
    denominator: str
    threshold: float
    at_least: bool = True  # PASS when ratio >= threshold (else ratio <= threshold)

    def evaluate(self, results: dict[str, Workload]) -> tuple[float | None, str]:
        wl = results.get(self.workload)
        value = None if wl is None else wl.ratio(self.numerator, self.denominator)
        if value is None:
            return None, "n/a"
        ok = value >= self.threshold if self.at_least else value <= self.threshold
        return value, "PASS" if ok else "FAIL"


GOALS = [
    Goal("load", "load no slower (ref/harmonia)", REFERENCE, HARMONIA, 1.0),
    Goal("memory", "memory no larger (ref/harmonia)", REFERENCE, HARMONIA, 1.0),
    Goal("render-weather", "render weather >= 10x", REFERENCE, HARMONIA, 10.0),
    Goal("render-agent", "render agent >= 10x", REFERENCE, HARMONIA, 10.0),
    Goal("render-weather", "cold render weather >= 15x", REFERENCE, HARMONIA_NC, 15.0),
    Goal("render-agent", "cold render agent >= 25x", REFERENCE, HARMONIA_NC, 25.0),
    Goal("render-weather", "cold weather / floor <= 1.3", HARMONIA_NC, FLOOR, 1.3, False),
    Goal("render-agent", "cold agent / floor <= 1.3", HARMONIA_NC, FLOOR, 1.3, False),
    Goal("render-120k", "render 120 KB >= 5x", REFERENCE, HARMONIA, 5.0),
    Goal("render-120k", "120 KB cold render / floor <= 1.3", HARMONIA_NC, FLOOR, 1.3, False),
    Goal("parse", "batch parse >= 30x", REFERENCE, HARMONIA, 30.0),
    Goal("stream", "streaming >= 10x per token", REFERENCE, HARMONIA, 10.0),
    Goal("stream", "events / properties <= 1", HARMONIA_EV, HARMONIA, 1.0, False),
]


# -- reporting ----------------------------------------------------------------------------

#: What a row is, printed after it.
ROW_NOTES = {
    HARMONIA_PY: "  engine=python",
    HARMONIA_NC: "  cold: render caches cleared",
    HARMONIA_EV: "  event API: feed()",
    FLOOR: "  floor",
}


def say(text: str = "") -> None:
    print(text, flush=True)


def print_workload(wl: Workload) -> None:
    say(f"\n[{wl.name}] {wl.title}")
    for note in wl.notes:
        say(f"  {note}")
    for problem in wl.mismatches:
        say(f"  !!!!!!!! MISMATCH: {problem}")
    for label, error in wl.errors.items():
        say(f"  {label}: ERROR {error}")
    for label, s in wl.results.items():
        calls = f"{s.n} samples x {s.number} calls" if s.number > 1 else f"{s.n} samples"
        note = ROW_NOTES.get(label, "")
        if label == HARMONIA and HARMONIA_NC in wl.results:
            note = "  cached: render caches warm"
        say(
            f"  {label:<10} median {wl.fmt(s.median)}/{wl.unit}   "
            f"p10 {wl.fmt(s.p10)}   p90 {wl.fmt(s.p90)}   ({calls}){note}"
        )
    ratio = wl.ratio(REFERENCE, HARMONIA)
    if ratio is not None:
        say(f"  ratio reference/harmonia: {ratio:.2f}x")
    others = (
        (HARMONIA_PY, "engine=python"),
        (HARMONIA_QT, "engine=quicktok"),
        (HARMONIA_NC, "no render caches"),
    )
    for side, what in others:
        ratio = wl.ratio(REFERENCE, side)
        if ratio is not None:
            say(f"  ratio reference/harmonia with {what}: {ratio:.2f}x")
    for side, what in (
        (HARMONIA, "harmonia"),
        (HARMONIA_NC, "cold render"),
        (HARMONIA_EV, "events"),
    ):
        ratio = wl.ratio(side, FLOOR)
        if ratio is not None:
            say(f"  {what} / floor: {ratio:.2f}x")
    events = wl.ratio(HARMONIA_EV, HARMONIA)
    if events is not None:
        say(f"  events (feed) / properties (process + last_content_delta): {events:.2f}x")
    raw = wl.ratio(HARMONIA, QUICKTOK)
    if raw is not None:
        say(f"  harmonia render / raw quicktok encode_ordinary: {raw:.2f}x")
    tik = wl.ratio(TIKTOKEN, QUICKTOK)
    if tik is not None:
        say(f"  raw tiktoken / raw quicktok: {tik:.2f}x")


def print_goals(results: dict[str, Workload]) -> list[dict[str, Any]]:
    say("\nGoals (ratios of medians)")
    say(f"  {'goal':<40} {'ratio':>8} {'needs':>8}  result")
    rows = []
    for goal in GOALS:
        value, verdict = goal.evaluate(results)
        shown = "n/a" if value is None else f"{value:.2f}x"
        needs = f"{'>=' if goal.at_least else '<='}{goal.threshold:g}"
        say(f"  {goal.description:<40} {shown:>8} {needs:>8}  {verdict}")
        rows.append({**vars(goal), "value": value, "result": verdict})
    mismatched = [wl.name for wl in results.values() if wl.mismatches]
    if mismatched:
        say(f"\n!!!!!!!! MISMATCH in: {', '.join(mismatched)} (see above)")
    return rows


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("harmonia", "openai-harmony", "quicktok-v1", "tiktoken"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    out["cpus"] = str(os.cpu_count())
    return out


def print_header(libs: Libraries, budget: Budget, quick: bool) -> dict[str, str]:
    info = versions()
    info["harmonia encoding"] = repr(libs.harmonia_enc)
    say("harmonia vs openai_harmony benchmark " + ("(--quick)" if quick else "(full)"))
    for key, value in info.items():
        say(f"  {key}: {value}")
    for label, why in libs.missing.items():
        say(f"  {label}: unavailable ({why})")
    say(
        f"  budget: {budget.seconds:g} s per workload, "
        f"samples of ~{budget.sample_seconds * 1e3:g} ms, {budget.load_runs} load runs per side"
    )
    return info


# -- profiling ------------------------------------------------------------------------------


def profile(wl: Workload, seconds: float = 0.6, top: int = 10) -> None:
    fn = wl.cases.get(HARMONIA)
    if fn is None:
        say("  (no harmonia case to profile)")
        return
    number = calibrate(fn, seconds)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(number):
        fn()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    say(f"  cProfile of harmonia, {number} calls, top {top} by tottime")
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    for line in lines[start:]:
        if line.strip():
            say("  " + line.rstrip())


# -- main ---------------------------------------------------------------------------------

PREPARERS: dict[str, Callable[[Libraries], Workload]] = {
    "render-weather": prepare_weather,
    "render-agent": prepare_agent,
    "render-120k": prepare_big,
    "parse": prepare_parse,
    "stream": prepare_stream,
}
WORKLOADS = ["load", *PREPARERS]


@contextlib.contextmanager
def offline_vocabulary() -> Iterator[str]:
    """A temporary ``o200k_base.tiktoken`` with ``TIKTOKEN_ENCODINGS_BASE`` pointing at it."""
    previous = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    with tempfile.TemporaryDirectory(prefix="harmonia-bench-") as directory:
        harmonia.write_tiktoken_file(directory)
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = directory
        try:
            yield directory
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_ENCODINGS_BASE", None)
            else:
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = previous


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a ~20 s run with fewer samples")
    parser.add_argument("--json", metavar="PATH", help="save all results as JSON")
    parser.add_argument("--only", metavar="NAMES", help=f"comma-separated: {','.join(WORKLOADS)}")
    parser.add_argument("--seconds", type=float, help="measuring time per workload")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile harmonia's side instead of timing"
    )
    args = parser.parse_args(argv)
    args.only = args.only.split(",") if args.only else WORKLOADS
    unknown = set(args.only) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {WORKLOADS}")
    return args


def run_workload(name: str, libs: Libraries, budget: Budget, profiling: bool) -> Workload:
    try:
        wl = PREPARERS[name](libs)
    except Exception as exc:
        wl = Workload(name, "(could not prepare)")
        wl.errors["setup"] = describe_error(exc)
        return wl
    if profiling:
        print_workload(wl)
        profile(wl)
        return wl
    try:
        measure(wl, budget)
    except Exception as exc:
        wl.errors["timing"] = describe_error(exc)
    return wl


def steady_state(libs: Libraries) -> None:
    """Put the default engine in the state a process that renders this much reaches.

    ``auto`` encodes in Python until it has spent about half a second doing so, then
    builds quicktok. Left alone, it would switch somewhere inside the first workloads
    that encode fresh text, and their cold rows would time a mix of both tiers. The
    pure-Python tier has its own row (``harm-py``); the load rows time fresh processes.
    """
    engine = libs.harmonia_enc._tokenizer.engine
    switch = getattr(engine, "switch", None)
    if switch is not None:
        switch()
        say(f"harmonia's default engine ({engine.name}) put in its steady state: {engine.status}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    budget = QUICK if args.quick else FULL
    if args.seconds is not None:
        budget = dataclasses.replace(budget, seconds=args.seconds)
    started = time.perf_counter()
    libs = load_libraries()
    meta = print_header(libs, budget, args.quick)
    results: dict[str, Workload] = {}
    if "load" in args.only and not args.profile:
        for wl in measure_load(libs, budget):
            results[wl.name] = wl
            print_workload(wl)
    steady_state(libs)
    for name in args.only:
        if name != "load":
            results[name] = wl = run_workload(name, libs, budget, args.profile)
            if not args.profile:
                print_workload(wl)
    engine = libs.harmonia_enc._tokenizer.engine
    say(
        f"\nharmonia's default engine ({engine.name}) ended the run on: "
        f"{getattr(engine, 'status', engine.name)}"
    )
    meta["auto engine at the end"] = getattr(engine, "status", engine.name)
    goals = [] if args.profile else print_goals(results)
    elapsed = time.perf_counter() - started
    say(f"\ntotal time {elapsed:.1f} s")
    meta.update(quick=str(args.quick), elapsed_seconds=f"{elapsed:.1f}")
    return {
        "meta": meta,
        "workloads": {name: wl.to_json() for name, wl in results.items()},
        "goals": goals,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with offline_vocabulary():
        report = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        say(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
