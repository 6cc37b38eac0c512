"""From an assistant message addressed to a tool, to a normalised :class:`ToolCall`.

The model does not always spell a recipient the way the declarations do. It
writes ``functions.browser.search`` or ``functions.python`` for the built-ins
(the gpt-oss reference server aliases both), sometimes a bare function name,
and a recipient may carry a stray ``to=`` or a content type glued to it. This
module maps every such spelling onto the canonical recipient of a namespace the
caller registered; it decides nothing else (the dispatcher runs the call; which
message is a call at all is :func:`harmonia._turn.classify`'s reading).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._names import FUNCTIONS
from .._turn import clean_recipient as clean_recipient


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
