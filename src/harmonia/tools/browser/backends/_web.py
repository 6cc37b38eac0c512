"""Web search backends: Exa and You.com over httpx (the ``browser-web`` extra).

Keys come from the constructor or the environment (``EXA_API_KEY``,
``YDC_API_KEY``) and are sent only in the ``x-api-key`` header: they never
appear in a repr, a log line or an error message. Base URLs are configurable
(a proxy, or a local test server). Fetched pages go through the same HTML
conversion as gpt-oss's backends, ``URL:`` line included, in a worker process
within a size and time budget (:class:`~harmonia.tools.browser.PageConverter`),
so a hostile page cannot hold the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from harmonia import InputError, ToolError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS, http_client
from harmonia._runtime import api_key as env_api_key

from .._convert import PageConverter
from .._page import Page, SearchResult
from ._base import VIEW_SOURCE_PREFIX

_MAX_BODY_CHARS = 500
_USER_AGENT = "harmonia-browser"


class _Secret:
    """Holds an API key; its repr and str never show it (a debugger's dump neither)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "_Secret('***')"

    __str__ = __repr__


class _WebBackend:
    name: ClassVar[str]
    env_var: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        source: str = "web",
        timeout: float = TIMEOUTS.web_request,
        client: Any = None,
        converter: PageConverter | None = None,
    ) -> None:
        key = env_api_key(api_key, self.env_var)
        if not key:
            raise InputError(
                f"{self.name} needs an API key: set the {self.env_var} environment variable "
                "or pass api_key="
            )
        self._key = _Secret(key)
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._source = source
        self._timeout = timeout
        self._client = client
        self._owns_client = client is None
        self.converter = converter if converter is not None else PageConverter()
        self._owns_converter = converter is None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, source={self._source!r})"

    @property
    def source(self) -> str:
        """The ``sources=`` value of the tool declaration."""
        return self._source

    def _http(self) -> Any:
        if self._client is None:
            self._client = http_client(  # environment proxies apply to web searches
                connect=self._timeout,
                read=self._timeout,
                trust_env=True,
                missing=InputError,
                hint=f"web search backends need it: {install_hint('browser-web')}",
            )
        return self._client

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        key = self._key.reveal()
        headers = {"x-api-key": key, "user-agent": _USER_AGENT}
        response = await self._http().request(
            method, self.base_url + path, json=json, params=params, headers=headers
        )
        if response.status_code != 200:
            body = response.text[:_MAX_BODY_CHARS].replace(key, "***")
            # The reference's words: the backend's class name.
            raise ToolError(f"{type(self).__name__} error {response.status_code}: {body}")
        return response.json()

    async def aclose(self) -> None:
        """Close the HTTP client and the page converter, unless the caller passed its own."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._owns_converter:
            await self.converter.aclose()

    async def _page(self, html: str, url: str, title: str) -> Page:
        return await self.converter.html_to_page(html, url, title, show_url=True)


class ExaBackend(_WebBackend):
    """Search and fetch with the Exa API (``EXA_API_KEY``)."""

    name = "Exa"
    env_var = "EXA_API_KEY"
    default_base_url = "https://api.exa.ai"

    async def search(self, query: str, topn: int) -> list[SearchResult]:
        """``POST /search`` with text and summary contents."""
        data = await self._request(
            "POST",
            "/search",
            json={"query": query, "numResults": topn, "contents": {"text": True, "summary": True}},
        )
        return [
            SearchResult(r["url"], r.get("title") or "", r.get("summary") or "", html=True)
            for r in data.get("results", [])
        ]

    async def fetch(self, url: str) -> Page:
        """``POST /contents`` for the page's HTML (a ``view-source:`` prefix is ignored)."""
        url = url.removeprefix(VIEW_SOURCE_PREFIX)
        data = await self._request(
            "POST", "/contents", json={"urls": [url], "text": {"includeHtmlTags": True}}
        )
        results = data.get("results") or []
        if not results:
            raise ToolError(f"No contents returned for {url}")
        return await self._page(results[0].get("text") or "", url, results[0].get("title") or "")


class YouComBackend(_WebBackend):
    """Search and fetch with the You.com API (``YDC_API_KEY``); web then news results."""

    name = "You.com"
    env_var = "YDC_API_KEY"
    default_base_url = "https://api.ydc-index.io"

    async def search(self, query: str, topn: int) -> list[SearchResult]:
        """``GET /v1/search``: web results, then news."""
        data = await self._request("GET", "/v1/search", params={"query": query, "count": topn})
        results = data.get("results") or {}
        out: list[SearchResult] = []
        for r in results.get("web", []):
            snippets = r.get("snippets") or r.get("description") or ""
            summary = " ".join(snippets) if isinstance(snippets, list) else str(snippets)
            out.append(SearchResult(r["url"], r.get("title") or "", summary, html=True))
        for r in results.get("news", []):
            description = r.get("description") or ""
            out.append(SearchResult(r["url"], r.get("title") or "", description, html=True))
        return out

    async def fetch(self, url: str) -> Page:
        """``POST /v1/contents`` with a live crawl (a ``view-source:`` prefix is ignored)."""
        url = url.removeprefix(VIEW_SOURCE_PREFIX)
        data = await self._request(
            "POST", "/v1/contents", json={"urls": [url], "livecrawl_formats": "html"}
        )
        if not data:
            raise ToolError(f"No contents returned for {url}")
        if "html" not in data[0]:
            raise ToolError(f"No HTML returned for {url}")
        return await self._page(data[0]["html"] or "", url, data[0].get("title") or "")
