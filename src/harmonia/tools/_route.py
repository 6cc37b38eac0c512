"""From an assistant message addressed to a tool, to a normalised :class:`ToolCall`.

The model does not always spell a recipient the way the declarations do. It
writes ``functions.browser.search`` or ``functions.python`` for the built-ins
(the gpt-oss reference server aliases both), sometimes a bare function name,
and a recipient may carry a stray ``to=`` or a content type glued to it. This
module maps every such spelling onto the canonical recipient of a namespace the
caller registered; it decides nothing else (the dispatcher runs the call).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._names import ASSISTANT, CODE, CONSTRAIN, FUNCTIONS, JSON
from ._base import ToolCall

# Recipients that address a person or the conversation, never a tool; and the
# content types the parser reads as a recipient when a header has no ``to=``
# (``<|channel|>final json`` is structured output, not a call to ``json``).
_NOT_TOOLS = frozenset({ASSISTANT, "all", "user", "system", "developer", JSON, CODE, "text"})


def clean_recipient(recipient: str) -> str:
    """The recipient without a leading ``to=`` or anything glued after it.

    >>> clean_recipient("to=functions.f <|constrain|>json")
    'functions.f'
    """
    text = recipient.strip()
    if text.startswith("to="):
        text = text[3:]
    text = text.split(CONSTRAIN, 1)[0]
    parts = text.split()
    return parts[0] if parts else ""


def is_tool_recipient(recipient: str | None) -> bool:
    """Whether a message with this recipient is a tool call (not ``assistant``/``all``/...).

    >>> is_tool_recipient("browser.search"), is_tool_recipient("all"), is_tool_recipient(None)
    (True, False, False)
    >>> is_tool_recipient("json"), is_tool_recipient("<|constrain|>json")
    (False, False)
    """
    if recipient is None:
        return False
    name = clean_recipient(recipient)
    return bool(name) and name not in _NOT_TOOLS


def resolve_recipient(
    recipient: str,
    namespaces: Collection[str],
    functions: Mapping[str, Collection[str]] | None = None,
) -> tuple[str, str, str | None]:
    """Map a sampled recipient to ``(canonical recipient, namespace, name)``.

    ``namespaces`` are the namespaces that exist (a runtime or a caller-handled
    declaration); ``functions`` optionally lists the function names of each, so
    that a bare ``get_weather`` finds ``functions.get_weather``. An unknown
    namespace is returned as it was written: the dispatcher answers it.

    >>> resolve_recipient("functions.browser.search", ["browser", "functions"])
    ('browser.search', 'browser', 'search')
    >>> resolve_recipient("functions.python", ["python", "functions"])
    ('python', 'python', None)
    >>> resolve_recipient("get_weather", ["functions"], {"functions": ["get_weather"]})
    ('functions.get_weather', 'functions', 'get_weather')
    """
    name = clean_recipient(recipient)
    names: Mapping[str, Collection[str]] = functions if functions is not None else {}
    if name in namespaces:
        return name, name, None
    head, _, rest = name.partition(".")
    if head == FUNCTIONS and rest and rest not in names.get(FUNCTIONS, ()):
        # ``functions.browser.search`` / ``functions.python``: the model put a
        # built-in under ``functions``; it means the built-in when one exists.
        inner_head = rest.partition(".")[0]
        if inner_head in namespaces and inner_head != FUNCTIONS:
            return resolve_recipient(rest, namespaces, names)
    if rest and head in namespaces:
        return name, head, rest
    if not rest:
        owners = [ns for ns, fns in names.items() if name in fns]
        if len(owners) == 1:
            return f"{owners[0]}.{name}", owners[0], name
    return name, head, rest or None


def call_from_fields(
    recipient: str,
    arguments: str,
    *,
    namespaces: Collection[str],
    functions: Mapping[str, Collection[str]] | None = None,
    channel: str | None = None,
    content_type: str | None = None,
    call_id: str | None = None,
) -> ToolCall:
    """A :class:`ToolCall` with its recipient resolved (see :func:`resolve_recipient`)."""
    canonical, namespace, name = resolve_recipient(recipient, namespaces, functions)
    return ToolCall(
        recipient=canonical,
        namespace=namespace,
        name=name,
        arguments=arguments,
        channel=channel,
        content_type=content_type,
        call_id=call_id,
    )
