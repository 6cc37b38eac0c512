"""Over a remote engine that cannot enforce a strict schema, the request is a 400, not a lie."""

from __future__ import annotations

import openai
import pytest
from serve_support import MODEL

pytest.importorskip("httpx", reason="httpx (harmonia[engines-http]) is not installed")


def test_llamacpp_refuses_json_schemas_it_cannot_enforce_with_a_400(make_server):
    from harmonia.engines.llamacpp import LlamaCppEngine

    # Nothing listens there: the refusal must come before any request is sent.
    server = make_server(lambda book: LlamaCppEngine("http://127.0.0.1:9"), warmup=False)
    fmt = {
        "type": "json_schema",
        "name": "n",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"n": {"type": "integer", "multipleOf": 3}},  # no GBNF for it
            "required": ["n"],
        },
    }
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model=MODEL, input="2+2?", text={"format": fmt})
    assert caught.value.body["code"] == "unsupported_constraint"
    assert server.app.state.service.admission.running == 0
    # A schema GBNF can hold is compiled: the request reaches the (absent) engine, a 502.
    fmt["schema"]["properties"]["n"] = {"type": "integer", "minimum": 0}
    with pytest.raises(openai.InternalServerError) as failed:
        server.client().responses.create(model=MODEL, input="2+2?", text={"format": fmt})
    assert failed.value.body["code"] == "engine_error"
    assert failed.value.status_code == 502


class _Refusing:
    """A stand-in vLLM on 127.0.0.1 that refuses every request as its llguidance 1.7 does."""

    def __init__(self) -> None:
        import http.server
        import json
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                message = "grammar is not valid: unknown field `json_allow_general_unicode_escapes`"
                data = json.dumps({"error": {"message": message, "code": 400}}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_a_grammar_the_engine_refuses_is_a_400_naming_it_never_a_500(make_server):
    from harmonia.engines.vllm import VLLMEngine

    refusing = _Refusing()
    try:
        server = make_server(lambda book: VLLMEngine(refusing.url), warmup=False)
        fmt = {
            "type": "json_schema",
            "json_schema": {"name": "n", "strict": True, "schema": {"type": "object"}},
        }
        with pytest.raises(openai.BadRequestError) as caught:
            server.client().chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "2+2?"}],
                response_format=fmt,
            )
        assert caught.value.status_code == 400
        assert caught.value.body["code"] == "engine_refused"
        assert "vllm at " in caught.value.body["message"]
        assert "unknown field" in caught.value.body["message"]
    finally:
        refusing.httpd.shutdown()
        refusing.httpd.server_close()


def test_an_unreachable_engine_is_a_502(make_server):
    from harmonia.engines.vllm import VLLMEngine

    server = make_server(lambda book: VLLMEngine("http://127.0.0.1:9"), warmup=False)
    with pytest.raises(openai.InternalServerError) as failed:
        server.client().responses.create(model=MODEL, input="2+2?")
    assert failed.value.status_code == 502
    assert "vllm at " in failed.value.body["message"]
