"""Exa and You.com backends against a mock transport and a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harmonia import InputError, ToolError
from harmonia.tools.browser import BrowserTool, ExaBackend, YouComBackend

httpx = pytest.importorskip("httpx", reason="web backends need the browser-web extra (httpx)")
pytest.importorskip("lxml", reason="fetched pages need the browser extra (lxml)")

KEY = "sk-test-secret-123"


def _client(handler: Any) -> Any:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def test_exa_request_shape_and_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_API_KEY", KEY)
    seen: list[Any] = []

    def handler(request: Any) -> Any:
        seen.append(request)
        body = json.loads(request.content)
        if request.url.path == "/search":
            assert body == {
                "query": "harbour",
                "numResults": 2,
                "contents": {"text": True, "summary": True},
            }
            results = [{"title": "Harbour", "url": "https://h.example/", "summary": "Docks."}]
            return httpx.Response(200, json={"results": results})
        assert body == {"urls": ["https://h.example/"], "text": {"includeHtmlTags": True}}
        html = "<p>The <a href='/docks'>docks</a>.</p>"
        return httpx.Response(200, json={"results": [{"title": "Harbour", "text": html}]})

    tool = BrowserTool(ExaBackend(client=_client(handler)))
    out = asyncio.run(tool.search("harbour", topn=2))
    assert "L4:   * 【0†Harbour†h.example】 Docks." in out.text
    page = asyncio.run(tool.open(0))
    assert page.text.endswith("L0: \nL1: URL: https://h.example/\nL2: The 【0†docks】.")
    assert [r.url.path for r in seen] == ["/search", "/contents"]
    assert all(r.headers["x-api-key"] == KEY for r in seen)
    assert str(seen[0].url).startswith("https://api.exa.ai/")


def test_youcom_request_shape_and_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("YDC_API_KEY", KEY)

    def handler(request: Any) -> Any:
        assert request.headers["x-api-key"] == KEY
        if request.method == "GET":
            assert request.url.path == "/v1/search"
            assert dict(request.url.params) == {"query": "tides", "count": "3"}
            results = {
                "web": [
                    {"title": "Tide tables", "url": "https://t.example/", "snippets": ["a", "b"]}
                ],
                "news": [{"title": "Storm", "url": "https://n.example/s", "description": "Wet."}],
            }
            return httpx.Response(200, json={"results": results})
        assert json.loads(request.content) == {
            "urls": ["https://t.example/"],
            "livecrawl_formats": "html",
        }
        return httpx.Response(200, json=[{"title": "Tides", "html": "<h1>Tides</h1>"}])

    backend = YouComBackend(client=_client(handler))
    results = asyncio.run(backend.search("tides", 3))
    assert [(r.url, r.summary) for r in results] == [
        ("https://t.example/", "a b"),
        ("https://n.example/s", "Wet."),
    ]
    page = asyncio.run(backend.fetch("view-source:https://t.example/"))
    assert (page.url, page.title, page.text) == (
        "https://t.example/",
        "Tides",
        "\nURL: https://t.example/\n# Tides",
    )


@pytest.mark.parametrize(
    ("cls", "var"), [(ExaBackend, "EXA_API_KEY"), (YouComBackend, "YDC_API_KEY")]
)
def test_missing_key_names_the_variable(
    cls: Any, var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(var, raising=False)
    with pytest.raises(InputError, match=var):
        cls()


def test_key_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXA_API_KEY", raising=False)

    def handler(request: Any) -> Any:  # a server that echoes the key back in an error
        return httpx.Response(401, text=f"bad key {request.headers['x-api-key']}")

    backend = ExaBackend(api_key=KEY, client=_client(handler))
    tool = BrowserTool(backend)
    assert KEY not in repr(backend) and KEY not in repr(tool) and KEY not in str(vars(backend))
    with pytest.raises(ToolError) as info:
        asyncio.run(tool.search("q"))
    assert str(info.value) == "Error during search for `q`: ExaBackend error 401: bad key ***"


class _Handler(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, Any]] = []  # noqa: RUF012 - test-only shared log

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.requests.append((self.path, self.headers["x-api-key"], body))
        results = [{"title": "Loopback", "url": "http://127.0.0.1/x", "summary": "Local."}]
        payload = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_sync_run_keeps_one_http_client_across_calls(server: str) -> None:
    tool = BrowserTool(ExaBackend(api_key=KEY, base_url=server))
    try:
        assert "【0†Loopback†127.0.0.1】 Local." in tool.run("search", query="a")
        assert "【0†Loopback†127.0.0.1】 Local." in tool.run("search", query="b")
    finally:
        tool.close()


def test_real_loopback_server(server: str) -> None:
    _Handler.requests.clear()
    backend = ExaBackend(api_key=KEY, base_url=server + "/")

    async def go() -> Any:
        try:
            return await backend.search("ping", 1)
        finally:
            await backend.aclose()

    [result] = asyncio.run(go())
    assert (result.title, result.url, result.summary) == (
        "Loopback",
        "http://127.0.0.1/x",
        "Local.",
    )
    assert _Handler.requests == [
        (
            "/search",
            KEY,
            {"query": "ping", "numResults": 1, "contents": {"text": True, "summary": True}},
        )
    ]


# -- as the reference shows them (issue: titles with markup, error names) ------


def test_result_titles_and_summaries_show_their_text_as_the_reference_does() -> None:
    def handler(request: Any) -> Any:
        results = [
            {
                "title": "AT&amp;T <b>bold</b> title",
                "url": "https://t.example/",
                "summary": "S &lt;x&gt;",
            },
            {"title": "Plain", "url": "https://p.example/a?x=1&y=2", "summary": "<i>it</i> here"},
        ]
        return httpx.Response(200, json={"results": results})

    tool = BrowserTool(ExaBackend(api_key=KEY, client=_client(handler)))
    out = asyncio.run(tool.search("q"))
    assert "L4:   * 【0†AT&T bold title†t.example】 S <x>" in out.text
    assert "L5:   * 【1†Plain†p.example】 it here" in out.text
    assert tool.state.page(0).links[1] == "https://p.example/a?x=1&y=2"


def test_backend_errors_name_the_backend_class_as_the_reference_does() -> None:
    def handler(request: Any) -> Any:
        return httpx.Response(503, text="busy")

    for cls in (ExaBackend, YouComBackend):
        tool = BrowserTool(cls(api_key=KEY, client=_client(handler)))
        with pytest.raises(ToolError) as info:
            asyncio.run(tool.search("q"))
        assert str(info.value) == f"Error during search for `q`: {cls.__name__} error 503: busy"


# -- budgets: a hostile page cannot hold the server ---------------------------


def test_a_page_over_the_size_budget_is_a_reply_the_model_reads() -> None:
    from harmonia.tools.browser import PageConverter

    def handler(request: Any) -> Any:
        html = "<p>" + "<a href='/x'>x</a>" * 10_000 + "</p>"
        return httpx.Response(200, json={"results": [{"title": "Big", "text": html}]})

    converter = PageConverter(max_chars=50_000, workers=0)
    tool = BrowserTool(ExaBackend(api_key=KEY, client=_client(handler), converter=converter))
    with pytest.raises(ToolError) as info:
        asyncio.run(tool.open("https://big.example/"))
    assert str(info.value) == (
        "Error fetching URL `https://big.example/`: the page is too large to show "
        "(180,007 characters of HTML; the limit is 50,000)"
    )
    assert len(tool.state) == 0


def test_web_pages_are_converted_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from harmonia.tools.browser import PageConverter, _html

    threads: list[bool] = []
    real = _html.html_to_page

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            threads.append(False)  # on the event loop's thread
        except RuntimeError:
            threads.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(_html, "html_to_page", spy)

    def handler(request: Any) -> Any:
        return httpx.Response(200, json={"results": [{"title": "T", "text": "<p>hi</p>"}]})

    converter = PageConverter(workers=0)
    tool = BrowserTool(ExaBackend(api_key=KEY, client=_client(handler), converter=converter))
    assert asyncio.run(tool.open("https://t.example/")).text.endswith("L2: hi")
    assert threads == [True]
