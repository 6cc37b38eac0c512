"""The small protocol a browser backend implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .._page import Page, SearchResult

VIEW_SOURCE_PREFIX = "view-source:"


@runtime_checkable
class Backend(Protocol):
    """Where the browser's searches and pages come from.

    ``source`` names it in the tool declaration (``sources=web``). ``search``
    returns at most ``topn`` results, best first; ``fetch`` returns the page at
    ``url`` (a URL starting with ``view-source:`` asks for the raw document, for
    backends that can show it). Any exception is reported to the model, after
    ``Error during search for ...`` or ``Error fetching URL ...``: raise
    :class:`harmonia.ToolError` with a message written for the model.
    """

    @property
    def source(self) -> str: ...

    async def search(self, query: str, topn: int) -> list[SearchResult]: ...

    async def fetch(self, url: str) -> Page: ...

    async def aclose(self) -> None: ...
