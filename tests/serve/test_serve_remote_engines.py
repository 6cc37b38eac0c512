"""Over a remote engine that cannot enforce a strict schema, the request is a 400, not a lie."""

from __future__ import annotations

import openai
import pytest
from serve_support import MODEL

pytest.importorskip("httpx", reason="httpx (harmonia[engines-http]) is not installed")


def test_llamacpp_refuses_json_schemas_with_a_400(make_server):
    from harmonia.engines.llamacpp import LlamaCppEngine

    # Nothing listens there: the refusal must come before any request is sent.
    server = make_server(lambda book: LlamaCppEngine("http://127.0.0.1:9"), warmup=False)
    fmt = {
        "type": "json_schema",
        "name": "n",
        "strict": True,
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model=MODEL, input="2+2?", text={"format": fmt})
    assert caught.value.body["code"] == "unsupported_constraint"
    assert server.app.state.service.admission.running == 0
    # Without strictness nothing needs enforcing: the request reaches the (absent) engine.
    with pytest.raises(openai.InternalServerError) as failed:
        server.client().responses.create(model=MODEL, input="2+2?")
    assert failed.value.body["code"] == "engine_error"
