"""The apps' shared runtime: one table of timeouts, one key reader, ids, SSE frames."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from harmonia import EngineError, _runtime
from harmonia._runtime import TIMEOUTS, api_key, api_keys, http_client, new_id, sse_frame

SRC = Path(__file__).resolve().parent.parent / "src" / "harmonia"


#: A name that holds a duration: a timeout, a wait, an interval, a grace period, seconds.
_DURATION = re.compile(r"timeout|seconds|interval|grace|wait|poll|(^|_)s$", re.IGNORECASE)
#: Durations that are no default limit of an app: the tokenizer's ski-rental budget and
#: its cost estimate (measured costs, in the core, not settings).
_NOT_LIMITS = frozenset({"DEFAULT_SWITCH_AFTER_SECONDS", "PYTHON_SECONDS_PER_CHAR"})


def _positive_number(node: ast.AST | None) -> bool:
    """A number literal above 0 (0 is a counter's start or "do not wait", no default)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return (
        isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value > 0  # type: ignore[operator]
    )


def _default_of(value: ast.AST | None) -> bool:
    """``= 5.0``, or a field's default: ``option(5.0, ...)``, ``field(default=5.0)``."""
    if _positive_number(value):
        return True
    if isinstance(value, ast.Call):
        first = value.args[0] if value.args else None
        return _positive_number(first) or any(
            k.arg == "default" and _positive_number(k.value) for k in value.keywords
        )
    return False


def duration_defaults(source: str) -> list[str]:
    """(line and name of) every duration written as a number: assigned to a name or a
    field, passed as a keyword (``timeout=30``), or a parameter's default."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = getattr(target, "id", None) or getattr(target, "attr", "")
                if name not in _NOT_LIMITS and _DURATION.search(name) and _default_of(node.value):
                    found.append(f"{node.lineno}: {name}")
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                named = keyword.arg is not None and _DURATION.search(keyword.arg)
                if named and _positive_number(keyword.value):
                    found.append(f"{node.lineno}: {keyword.arg}=")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            pairs = [
                *zip(
                    positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
                ),
                *zip(args.kwonlyargs, args.kw_defaults, strict=True),
            ]
            for arg, default in pairs:
                if _DURATION.search(arg.arg) and _positive_number(default):
                    found.append(f"{node.lineno}: {arg.arg}=")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_the_checker_finds_every_kind_of_duration_default() -> None:
    source = """
REQUEST_TIMEOUT = 5
DEFAULT_MAX_SECONDS = 600.0
class C:
    ping_interval_s: float = option(15.0, help="x")
    cancel_poll_s: float = 0.25
    grace: float = field(default=5.0)
    count = 3
    waiting = 0
sqlite3.connect(path, timeout=30.0)
get(timeout=0)
def probe(timeout=60): ...
def f(timeout=TIMEOUTS.tool_call, retries=3): ...
"""
    assert duration_defaults(source) == [
        "2: REQUEST_TIMEOUT",
        "3: DEFAULT_MAX_SECONDS",
        "5: ping_interval_s",
        "6: cancel_poll_s",
        "7: grace",
        "10: timeout=",
        "12: timeout=",
    ]


def test_no_timeout_default_is_written_outside_the_table() -> None:
    """Every default timeout, wait and interval is a field of ``TIMEOUTS``: a number
    written elsewhere is a second default."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_runtime.py":
            continue
        relative = path.relative_to(SRC).as_posix()
        found += [f"{relative}:{hit}" for hit in duration_defaults(path.read_text())]
    assert found == [], "move these into harmonia._runtime.TIMEOUTS:\n" + "\n".join(found)


def test_the_defaults_are_the_documented_ones() -> None:
    from harmonia.engines._http import HttpOptions
    from harmonia.serve import ServerConfig
    from harmonia.tools import DEFAULT_TIMEOUT

    assert DEFAULT_TIMEOUT == TIMEOUTS.tool_call == 180.0
    assert (HttpOptions().connect_timeout, HttpOptions().read_timeout) == (10.0, 60.0)
    assert ServerConfig().send_timeout_s == TIMEOUTS.client_send == 30.0


def test_keys_come_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HARMONIA_TEST_KEY", "from-env")
    assert api_key("given", "HARMONIA_TEST_KEY") == "given"
    assert api_key(None, "HARMONIA_TEST_KEY") == "from-env"
    monkeypatch.setenv("HARMONIA_TEST_KEY", "")
    assert api_key(None, "HARMONIA_TEST_KEY") is None
    assert api_keys("K", {"K": " a ,b,, "}) == ("a", "b") and api_keys("K", {}) == ()


def test_ids_and_frames() -> None:
    one, two = new_id("resp"), new_id("resp")
    assert one != two and one.startswith("resp_") and len(one) == len("resp_") + 24
    assert sse_frame(b"{}") == b"data: {}\n\n"
    assert sse_frame(b"{}", "done") == b"event: done\ndata: {}\n\n"
    assert _runtime.SSE_DONE == b"data: [DONE]\n\n"


def test_http_clients_are_built_one_way(monkeypatch: pytest.MonkeyPatch) -> None:
    httpx = pytest.importorskip("httpx", reason="httpx is not installed (an optional extra)")
    client = http_client(connect=1.5, read=7.0, headers={"X-A": "b"})
    try:
        assert client.timeout == httpx.Timeout(connect=1.5, read=7.0, write=7.0, pool=1.5)
        assert client.headers["x-a"] == "b"
    finally:
        import asyncio

        asyncio.run(client.aclose())
    import builtins

    real_import = builtins.__import__

    def no_httpx(name: str, *args: object, **kwargs: object) -> object:
        if name == "httpx":
            raise ImportError("no httpx here")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_httpx)
    with pytest.raises(EngineError, match="httpx is not installed: try this"):
        http_client(connect=1, read=1, missing=EngineError, hint="try this")
