"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import json
from typing import Any

from harmonia import EngineError, HarmonyError, InputError
from harmonia._runtime import TIMEOUTS

from ..engines import EngineRefusedError, UnsupportedConstraintError, UnsupportedParameterError
from ..openai_compat import RequestError
from ._store import StoreUnavailableError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}


class APIError(HarmonyError):
    """An HTTP error answer: status, message, and OpenAI's ``type``/``param``/``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return _TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def json_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


class ServerShuttingDown(APIError):
    """The server is shutting down: no new generation starts, and one still running when
    the shutdown timeout runs out is ended (503 before its answer started; a terminal
    event in a stream)."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message, code="server_shutting_down", headers={"Retry-After": "1"})


def from_exception(exc: BaseException) -> APIError:
    """The answer for an exception raised while preparing a request."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, RequestError):
        return APIError(400, str(exc), param=exc.path or None, code="invalid_value")
    if isinstance(exc, UnsupportedConstraintError):
        return APIError(
            400,
            f"this server's engine cannot enforce what the request asks for: {exc}",
            code="unsupported_constraint",
        )
    if isinstance(exc, UnsupportedParameterError):
        return APIError(
            400,
            f"this server's engine cannot do what the request asks for: {exc}",
            code="unsupported_parameter",
        )
    if isinstance(exc, InputError):
        return APIError(400, str(exc), code="invalid_value")
    if isinstance(exc, EngineError):
        return engine_error(exc)
    if isinstance(exc, StoreUnavailableError):
        return store_unavailable(exc)
    return APIError(500, "internal server error; the server log has the details", code="internal")


#: Statuses of an engine's answer that say the request was wrong for it (passed on as 400).
_REFUSALS = frozenset({400, 413, 422})


def engine_error(exc: EngineError) -> APIError:
    """The answer for an engine failure: never a 500, the engine is named in ``exc``.

    A request the engine's server refused as invalid (HTTP 400, 413, 422: a grammar
    or schema it cannot compile, a prompt too long) is the client's 400; every other
    failure (unreachable, broken stream, a 5xx, a refused key) is a 502 Bad Gateway.
    """
    if isinstance(exc, EngineRefusedError) and exc.status in _REFUSALS:
        return APIError(400, f"the engine refused the request: {exc}", code="engine_refused")
    return APIError(502, f"the engine failed: {exc}", code="engine_error")


def store_unavailable(exc: StoreUnavailableError) -> APIError:
    """The answer when the response store does not answer: a 503 ``store_unavailable``
    with ``Retry-After`` (the server is fine and the request may be; the store is not)."""
    return APIError(
        503, str(exc), code="store_unavailable", headers={"Retry-After": str(TIMEOUTS.retry_after)}
    )
