"""What the HTTP engines share: a base class, the client, SSE, and errors that say what to check.

Every failure becomes an :class:`~harmonia.EngineError` naming the engine and
the URL: unreachable (with what to check), an HTTP error status (with the
server's own message), malformed stream data, a stall (no data within the read
timeout), a connection that broke mid-stream. The API key goes into the
``Authorization`` header only; it is never part of a repr or a message.

The client is :mod:`harmonia.engines._wire`: plain HTTP/1.1 over asyncio
streams that reads the engine's stream a socket read at a time (every event
that has arrived, split and decoded in one go), not an event at a time: the
engine stream is ``harmonia serve``'s hot path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from harmonia import EngineError, InputError
from harmonia._runtime import TIMEOUTS
from harmonia._runtime import api_key as resolve_api_key

from ._base import EngineRefusedError
from ._generation import PromptEngine
from ._wire import Answer, Events, Wire, WireError, decode_all

T = TypeVar("T")

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


class HttpEngine(PromptEngine):
    """What the HTTP engines share: the checked base URL, the client, health and closing."""

    supports_logprobs = True

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        api_key_env: str | None,
        options: HttpOptions | None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InputError(
                f"{self.name}: base_url must be an http:// or https:// address of the server, "
                f"not {base_url!r}"
            )
        self.base_url = base_url.rstrip("/")
        self._http = HttpClient(
            engine=self.name,
            base_url=self.base_url,
            api_key=resolve_api_key(api_key, api_key_env),
            options=options or HttpOptions(),
        )

    async def health(self) -> None:
        """Raise :class:`~harmonia.EngineError` unless the server's ``/health`` answers 200
        (llama-server answers 503 while it loads the model)."""
        await self._http.check("/health")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


class HttpClient:
    """One engine's connection pool and its error mapping."""

    def __init__(
        self, *, engine: str, base_url: str, api_key: str | None, options: HttpOptions
    ) -> None:
        self.engine = engine
        self.base_url = base_url
        self.options = options
        self._api_key = api_key
        self._wire: Wire | None = None

    def __repr__(self) -> str:  # the key stays out
        return f"HttpClient({self.engine!r}, {self.base_url!r})"

    def _get_wire(self) -> Wire:
        if self._wire is None:
            headers = {"Accept": "text/event-stream", **(self.options.headers or {})}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            # No proxy between us and the engine: the connection is ours (as trust_env off).
            self._wire = Wire(
                self.base_url,
                connect_timeout=self.options.connect_timeout,
                read_timeout=self.options.read_timeout,
                headers=headers,
            )
        return self._wire

    async def aclose(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def error(self, message: str, url: str) -> EngineError:
        return EngineError(f"{self.engine} at {url}: {message}", engine=self.engine, url=url)

    def _wire_error(self, exc: WireError, url: str) -> EngineError:
        messages = {
            "connect": f"cannot connect ({exc}); check that the server is running and that "
            "the base URL (scheme, host, port) is right",
            "connect_timeout": f"no connection within {self.options.connect_timeout} s; "
            "check the address and any firewall",
            "stall": f"the stream stalled: no data for {self.options.read_timeout} s "
            "(HttpOptions.read_timeout); the server may be overloaded or hung",
            "broken": f"the connection broke mid-stream ({exc})",
        }
        return self.error(messages.get(exc.kind, f"malformed HTTP answer: {exc}"), url)

    async def _get(self, path: str, *, health: bool = False) -> bytes:
        """GET ``path``'s body: an EngineError unless it answers 200 (``health``: says so)."""
        url = self.base_url + path
        try:
            answer = await self._get_wire().request("GET", path)
            try:
                status, body = answer.status, await answer.body()
            finally:
                answer.close()
        except WireError as exc:
            error = self._wire_error(exc, url)
            raise (self.error(f"health check failed: {error}", url) if health else error) from None
        if status != 200:
            detail = _describe_text(body[:_BODY_QUOTE].decode("utf-8", "replace"))
            raise self.error(f"{'health check: ' if health else ''}HTTP {status}: {detail}", url)
        return body

    async def check(self, path: str = "/health") -> None:
        """GET ``path`` (the server's health route): an EngineError unless it answers 200."""
        await self._get(path, health=True)

    async def get_json(self, path: str) -> Any:
        """GET ``path`` and parse its JSON answer (an EngineError unless it is a 200)."""
        body = await self._get(path)
        url = self.base_url + path
        try:
            return json.loads(body)
        except ValueError:
            raise self.error(f"not JSON: {body[:200]!r}", url) from None

    async def stream_batches(
        self,
        path: str,
        body: Mapping[str, Any],
        on_batch: Callable[[list[dict[str, Any]]], T | None],
        *,
        not_found: type[Exception] | None = None,
        last: Callable[[dict[str, Any]], bool] | None = None,
    ) -> T | None:
        """POST ``body`` as JSON; hand ``on_batch`` the parsed SSE ``data:`` payloads, a
        read at a time, until it returns something (returned) or the stream ends (``None``).

        Each batch holds every payload one socket read completed (at least one),
        decoded in one ``json.loads``; ``on_batch`` runs in the connection's own
        callback (:meth:`Answer.follow`), and what it raises is raised here. The
        stream ends at ``data: [DONE]`` or at the end of the body; the payloads
        before a bad one are handed on before its error. ``not_found``, when
        given, is raised (instead of an EngineError) on a 404, so a caller can
        fall back to another endpoint. ``last`` says whether a payload is the
        engine's last event (its finish): when ``on_batch`` stops at one, or
        raises to stop there, the connection is kept for the next request once
        the rest of the answer has come (:meth:`Answer.close`).
        """
        url = self.base_url + path
        try:
            answer = await self._get_wire().request("POST", path, body)
        except WireError as exc:
            raise self._wire_error(exc, url) from None
        result: T | None = None
        finished = False  # the engine has sent its last event
        events = Events()

        def take(batch: list[dict[str, Any]]) -> bool:
            nonlocal result
            result = on_batch(batch)
            return result is not None

        def sink(piece: bytes) -> bool:
            nonlocal result, finished
            batch, failure, done = self._read_events(events.feed(piece), url)
            if batch:
                try:
                    result = on_batch(batch)
                except Exception:  # the generation's stop (or an error) came with the batch
                    finished = last is not None and any(map(last, batch))
                    raise
                if result is not None:
                    finished = True
                    return True
            if failure is not None:
                raise failure
            finished = done
            return done

        try:
            if answer.status == 404 and not_found is not None:
                raise not_found(url)
            if answer.status >= 400:
                raise EngineRefusedError(
                    f"{self.engine} at {url}: {await self._status_message(answer)}",
                    status=answer.status,
                    engine=self.engine,
                    url=url,
                )
            await answer.follow(sink)
            if result is None and answer.ended:
                batch, failure, _ = self._read_events(events.rest(), url)
                if batch:
                    take(batch)
                if failure is not None and result is None:
                    raise failure
            return result
        except WireError as exc:
            raise self._wire_error(exc, url) from None
        finally:
            answer.close(drain=finished)

    def _read_events(
        self, events: list[tuple[str, bytes]], url: str
    ) -> tuple[list[dict[str, Any]], EngineError | None, bool]:
        """The payloads of ``events`` up to the first bad one, that one's error, and
        whether ``[DONE]`` came."""
        datas: list[bytes] = []
        failure: EngineError | None = None
        done = False
        for event, data in events:
            if event == "error":
                text = _describe_text(data.decode("utf-8", "replace"))
                failure = self.error(f"the server reported an error: {text}", url)
                break
            if data == b"[DONE]":
                done = True
                break
            datas.append(data)
        decoded = decode_all(datas)
        if decoded is None:  # one is not JSON: find which, keep the ones before it
            decoded = []
            for data in datas:
                try:
                    decoded.append(json.loads(data))
                except ValueError:
                    text = data[:200].decode("utf-8", "replace")
                    failure = self.error(f"malformed stream data (not JSON): {text!r}", url)
                    break
        for position, payload in enumerate(decoded):
            if not isinstance(payload, dict):
                text = datas[position][:200].decode("utf-8", "replace")
                bad = self.error(f"malformed stream data (not an object): {text!r}", url)
            elif "error" in payload:
                bad = self.error(f"the server reported an error: {_describe(payload)}", url)
            else:
                continue
            return decoded[:position], bad, False
        return decoded, failure, done and failure is None

    async def _status_message(self, answer: Answer) -> str:
        raw = (await answer.body(_BODY_QUOTE))[:_BODY_QUOTE].decode("utf-8", "replace")
        hint = "; check the API key" if answer.status in (401, 403) else ""
        return f"HTTP {answer.status}: {_describe_text(raw)}{hint}"


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
    # ``type(v) is int``: JSON's ints, never a bool. One id per event is the common case
    # (one call per streamed token): checked without a generator.
    if type(value) is list:
        if len(value) == 1:
            first = value[0]
            if type(first) is int and first >= 0:
                return value
        elif all(type(v) is int and v >= 0 for v in value):
            return value
    raise client.error(f"malformed stream data: {what} is {value!r}, not token ids", url)
