"""The apps' shared runtime: one table of timeouts, one key reader, ids, SSE frames."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harmonia import EngineError, _runtime
from harmonia._runtime import TIMEOUTS, api_key, api_keys, http_client, new_id, sse_frame

SRC = Path(__file__).resolve().parent.parent / "src" / "harmonia"


def test_no_timeout_default_is_written_outside_the_table() -> None:
    """``*timeout* = <number>`` (a constant or a field's default) elsewhere is a second
    default."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_runtime.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            value = getattr(node, "value", None)
            for target in targets:
                named = isinstance(target, ast.Name) and "TIMEOUT" in target.id.upper()
                number = isinstance(value, ast.Constant) and type(value.value) in (int, float)
                if named and number:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


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
