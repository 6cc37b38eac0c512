"""Errors raised for API requests harmonia cannot convert.

All are :class:`harmonia.InputError` (so also ``ValueError``): the caller's
request is wrong, a server should answer 400. ``path`` is a JSON path into the
request, such as ``messages[3].tool_calls[0].function.arguments``.
"""

from __future__ import annotations

from .._errors import InputError


class RequestError(InputError):
    """An OpenAI API request that cannot be turned into a harmony conversation.

    >>> e = RequestError("must be a string", "messages[0].content")
    >>> str(e), e.path
    ('must be a string (at messages[0].content)', 'messages[0].content')
    """

    def __init__(self, reason: str, path: str) -> None:
        self.reason = reason
        self.path = path
        super().__init__(f"{reason} (at {path})" if path else reason)


class UnsupportedContentError(RequestError):
    """Content harmony cannot carry (images, audio, files, unknown item types)."""


class UnknownRoleError(RequestError):
    """A message whose role is none of the API's (``user``, ``assistant``, ``system``,
    ``developer``, ``tool``)."""


class ConflictingReasoningError(RequestError):
    """An assistant message whose reasoning fields disagree: give the reasoning once."""


class ToolCallMatchError(RequestError):
    """Tool calls and tool results that do not match: missing, unknown or repeated ids."""
