"""An OpenAI-compatible HTTP server for gpt-oss over any harmonia engine.

:func:`create_app` builds the ASGI app (FastAPI/Starlette; run it with
uvicorn): ``/v1/chat/completions``, ``/v1/responses`` (with a response store,
background responses and cancellation), ``/v1/models``, ``/health`` and
``/metrics``. Needs ``harmonia[serve]``; see ``docs/serve.md``.
"""

from ._agent_driver import Turn
from ._agent_tool_loop import AgentToolLoop
from ._config import API_KEYS_ENV, ServerConfig, api_keys_from_env
from ._create import create_app
from ._errors import APIError
from ._redis_store import RedisStore
from ._store import (
    Lease,
    MemoryStore,
    ResponseStore,
    SqliteStore,
    StoredResponse,
    StoreUnavailableError,
    open_store,
    tenant_id,
)
from ._tool_loop import ToolLoop

__all__ = [
    "API_KEYS_ENV",
    "APIError",
    "AgentToolLoop",
    "Lease",
    "MemoryStore",
    "RedisStore",
    "ResponseStore",
    "ServerConfig",
    "SqliteStore",
    "StoreUnavailableError",
    "StoredResponse",
    "ToolLoop",
    "Turn",
    "api_keys_from_env",
    "create_app",
    "open_store",
    "tenant_id",
]
