"""``/v1/completions`` is deliberately absent (docs/serve.md says why): a clear 404."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="harmonia[serve] (fastapi) is not installed")


def test_the_raw_completions_route_is_a_documented_404() -> None:
    from pathlib import Path

    from starlette.testclient import TestClient

    from harmonia.engines import ScriptedEngine
    from harmonia.serve import ServerConfig, create_app

    app = create_app(ScriptedEngine([]), ServerConfig(warmup=False, store="none"))
    with TestClient(app) as client:
        response = client.post("/v1/completions", json={"model": "gpt-oss", "prompt": "Hi"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_route"
    doc = (Path(__file__).resolve().parents[2] / "docs" / "serve.md").read_text(encoding="utf-8")
    assert "`POST /v1/completions` (the legacy raw-text API) is deliberately absent" in doc
