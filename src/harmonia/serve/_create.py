"""``create_app`` without importing FastAPI until it is called."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..engines import Engine
    from ._config import ServerConfig
    from ._store import ResponseStore
    from ._tool_loop import ToolLoop


def create_app(
    engine: Engine,
    config: ServerConfig | None = None,
    *,
    store: ResponseStore | None = None,
    tool_loop: ToolLoop | None = None,
) -> FastAPI:
    """An OpenAI-compatible ASGI app serving ``engine`` (run it with uvicorn).

    ``store`` overrides the store ``config.store`` names; ``tool_loop`` runs
    built-in tools (without one, they are left out of the requests that declare them). The
    engine is not closed with the app: its owner closes it. FastAPI is
    imported only now, so ``import harmonia.serve`` stays light.

    .. code-block:: python

        import uvicorn
        from harmonia.engines import ScriptedEngine
        from harmonia.serve import ServerConfig, create_app

        app = create_app(ScriptedEngine([...]), ServerConfig(store="memory"))
        uvicorn.run(app, host="127.0.0.1", port=8000)
    """
    from ._app import build_app

    return build_app(engine, config, store, tool_loop)
