"""The browser's page stack: cursor ``c`` is the ``c``-th page shown in the conversation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harmonia import InputError, ToolError

from ._page import Page


class BrowserState:
    """Every page shown so far, indexed by cursor; serialisable to resume a conversation.

    Each ``search``, ``open`` (a scroll too) and ``find`` pushes a page, and
    the new index is the cursor the model sees. Pages are kept per cursor, so
    an old search cursor still shows its own results.

    >>> state = BrowserState()
    >>> state.push(Page("https://example.org/", "Home", "hi"))
    0
    >>> BrowserState.from_dict(state.to_dict()).page(0).title
    'Home'
    """

    def __init__(self, pages: list[Page] | None = None) -> None:
        self._pages: list[Page] = list(pages or [])

    def __len__(self) -> int:
        return len(self._pages)

    @property
    def cursor(self) -> int:
        """The newest cursor (``-1`` before the first page)."""
        return len(self._pages) - 1

    def push(self, page: Page) -> int:
        """Add ``page`` and return its cursor."""
        self._pages.append(page)
        return len(self._pages) - 1

    def page(self, cursor: int = -1) -> Page:
        """The page at ``cursor`` (``-1``: the newest); a :class:`harmonia.ToolError` if none."""
        if not self._pages:
            raise ToolError("No pages to access yet: call `search`, or `open` with a URL, first.")
        if cursor == -1:
            return self._pages[-1]
        if not 0 <= cursor < len(self._pages):
            raise ToolError(
                f"Cursor `{cursor}` is out of range. "
                f"Available cursor indices: [0 - {len(self._pages) - 1}]."
            )
        return self._pages[cursor]

    def latest_with_url(self, url: str, kind: str = "page") -> Page | None:
        """The newest page of ``kind`` with ``url``, to follow a link without refetching."""
        for page in reversed(self._pages):
            if page.kind == kind and page.url == url:
                return page
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each distinct page once, and the stack as indexes into them."""
        distinct: list[Page] = []
        index_of: dict[int, int] = {}
        stack: list[int] = []
        for page in self._pages:
            key = id(page)
            if key not in index_of:
                index_of[key] = len(distinct)
                distinct.append(page)
            stack.append(index_of[key])
        return {"pages": [p.to_dict() for p in distinct], "stack": stack}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> BrowserState:
        """Rebuild a state written by :meth:`to_dict`."""
        try:
            distinct = [Page.from_dict(p) for p in raw["pages"]]
            return cls([distinct[int(i)] for i in raw["stack"]])
        except (KeyError, TypeError, IndexError, ValueError) as e:
            if isinstance(e, InputError):
                raise
            raise InputError(
                f"not a browser state dict ({e!r}); use BrowserState.to_dict() output"
            ) from e
