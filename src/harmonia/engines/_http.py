"""What the HTTP engines share: the client, streaming SSE, and errors that say what to check.

Every failure becomes an :class:`~harmonia.EngineError` naming the engine and
the URL: unreachable (with what to check), an HTTP error status (with the
server's own message), malformed stream data, a stall (no data within the read
timeout), a connection that broke mid-stream. The API key goes into the
``Authorization`` header only; it is never part of a repr or a message.

The client is httpx, imported when the first request is made
(the ``engines-http`` extra: ``harmonia._errors.install_hint`` says how).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from harmonia import EngineError, InputError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS, http_client

from ._base import EngineRefusedError

if TYPE_CHECKING:
    import httpx

#: Longest piece of a server's error body quoted in a message.
_BODY_QUOTE: Final = 500


@dataclass(frozen=True)
class HttpOptions:
    """Connection settings of an HTTP engine; every default lives here.

    * ``connect_timeout``: seconds to open the connection;
    * ``read_timeout``: seconds without any data before the stream counts as
      stalled (long prompts: servers that ping during prefill, like
      llama-server, keep this short safe);
    * ``headers``: extra request headers (never put the API key here: use
      the engine's ``api_key`` or its environment variable).
    """

    connect_timeout: float = TIMEOUTS.engine_connect
    read_timeout: float = TIMEOUTS.engine_read
    headers: Mapping[str, str] | None = None


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise EngineError(f"the HTTP engines need httpx: {install_hint('engines-http')}") from exc
    return httpx


def normalise_base_url(base_url: str, engine: str) -> str:
    """``base_url`` without a trailing slash; :class:`~harmonia.InputError` if it is no URL."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise InputError(
            f"{engine}: base_url must be an http:// or https:// address of the server, "
            f"not {base_url!r}"
        )
    return base_url.rstrip("/")


class HttpClient:
    """One engine's connection pool and its error mapping."""

    def __init__(
        self, *, engine: str, base_url: str, api_key: str | None, options: HttpOptions
    ) -> None:
        self.engine = engine
        self.base_url = base_url
        self.options = options
        self._api_key = api_key
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:  # the key stays out
        return f"HttpClient({self.engine!r}, {self.base_url!r})"

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Accept": "text/event-stream", **(self.options.headers or {})}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            # No proxy from the environment between us and the engine (trust_env off).
            self._client = http_client(
                connect=self.options.connect_timeout,
                read=self.options.read_timeout,
                headers=headers,
                missing=EngineError,
                hint=f"the HTTP engines need it: {install_hint('engines-http')}",
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def error(self, message: str, url: str) -> EngineError:
        return EngineError(f"{self.engine} at {url}: {message}", engine=self.engine, url=url)

    async def stream_events(
        self, path: str, body: Mapping[str, Any], *, not_found: type[Exception] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """POST ``body`` as JSON and yield each SSE ``data:`` payload, parsed.

        Ends at ``data: [DONE]`` or at the end of the stream. ``not_found``,
        when given, is raised (instead of an EngineError) on a 404, so a caller
        can fall back to another endpoint.
        """
        httpx = _httpx()
        url = self.base_url + path
        client = self._get_client()
        try:
            async with client.stream("POST", url, json=body) as response:
                if response.status_code == 404 and not_found is not None:
                    raise not_found(url)
                if response.status_code >= 400:
                    raise EngineRefusedError(
                        f"{self.engine} at {url}: {await self._status_message(response)}",
                        status=response.status_code,
                        engine=self.engine,
                        url=url,
                    )
                async for event, data in _sse(response.aiter_lines()):
                    if data == "[DONE]":
                        return
                    if event == "error":
                        raise self.error(
                            f"the server reported an error: {_describe_text(data)}", url
                        )
                    payload = self._parse(data, url)
                    if "error" in payload:
                        raise self.error(f"the server reported an error: {_describe(payload)}", url)
                    yield payload
        except httpx.ConnectError as exc:
            raise self.error(
                f"cannot connect ({exc}); check that the server is running and that the "
                "base URL (scheme, host, port) is right",
                url,
            ) from exc
        except httpx.ConnectTimeout as exc:
            raise self.error(
                f"no connection within {self.options.connect_timeout} s; check the address "
                "and any firewall",
                url,
            ) from exc
        except httpx.ReadTimeout as exc:
            raise self.error(
                f"the stream stalled: no data for {self.options.read_timeout} s "
                "(HttpOptions.read_timeout); the server may be overloaded or hung",
                url,
            ) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise self.error(f"the connection broke mid-stream ({exc})", url) from exc
        except httpx.HTTPError as exc:
            raise self.error(f"{type(exc).__name__}: {exc}", url) from exc

    async def check(self, path: str = "/health") -> None:
        """GET ``path`` (the server's health route): an EngineError unless it answers 200."""
        httpx = _httpx()
        url = self.base_url + path
        try:
            response = await self._get_client().get(url)
        except httpx.HTTPError as exc:
            raise self.error(f"health check failed: cannot reach it ({exc})", url) from exc
        if response.status_code != 200:
            raise self.error(f"health check: {await self._status_message(response)}", url)

    async def _status_message(self, response: Any) -> str:
        raw = (await response.aread())[:_BODY_QUOTE].decode("utf-8", "replace")
        detail = _describe_text(raw)
        hint = ""
        if response.status_code in (401, 403):
            hint = "; check the API key"
        return f"HTTP {response.status_code}: {detail}{hint}"

    def _parse(self, data: str, url: str) -> dict[str, Any]:
        try:
            payload = json.loads(data)
        except ValueError:
            raise self.error(f"malformed stream data (not JSON): {data[:200]!r}", url) from None
        if not isinstance(payload, dict):
            raise self.error(f"malformed stream data (not an object): {data[:200]!r}", url)
        return payload


async def _sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events as ``(event, data)``; comments (pings) are skipped."""
    event = "message"
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "error":
            # llama-server writes failures as "error: {...}" lines of their own.
            yield "error", value
    if data:
        yield event, "\n".join(data)


def _describe_text(raw: str) -> str:
    """The message in an error body that may or may not be JSON."""
    try:
        return _describe(json.loads(raw))
    except ValueError:
        return raw.strip()[:_BODY_QUOTE] or "(empty body)"


def _describe(payload: Any) -> str:
    """The message of an OpenAI-, vLLM- or llama.cpp-shaped error object."""
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
            if message:
                return str(message)[:_BODY_QUOTE]
        elif isinstance(error, str):
            return error[:_BODY_QUOTE]
        if "detail" in payload:
            return str(payload["detail"])[:_BODY_QUOTE]
        if "message" in payload:
            return str(payload["message"])[:_BODY_QUOTE]
    return json.dumps(payload)[:_BODY_QUOTE]


def int_list(value: Any, what: str, client: HttpClient, url: str) -> list[int]:
    """``value`` as a list of token ids, or an EngineError about malformed data."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise client.error(f"malformed stream data: {what} is {value!r}, not token ids", url)
    return value
