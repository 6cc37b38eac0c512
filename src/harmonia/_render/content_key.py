"""Value keys for system and developer contents, cheaper than their JSON.

The renderer caches a content's ids by its value, so that a later change to the
object can never hit a stale entry. The JSON of ``to_dict()`` is such a key for
any content, but writing it costs more than anything else a first render of a
small content does. For a content whose fields have their usual types, a tuple of
the fields says the same for less: only each tool's ``parameters`` (any JSON)
goes in as text, the text ``json.dumps`` writes, which is also the text the
schema round trip needs (see :func:`.serde_json.serde_parse`), so it is written
once per render instead of twice.

:func:`content_key` gives ``None`` for anything else (a field of another type, a
subclass, response formats, a very deep schema); the renderer then keys by JSON.
Every field of the content classes is in the key: a test compares the fields
named here with the dataclasses' own, so a new field cannot be forgotten.
"""

from __future__ import annotations

from typing import Final

from .._content import (
    ChannelConfig,
    DeveloperContent,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from .._enums import ReasoningEffort
from .serde_json import MAX_NESTING, write_json

#: The parameters given to the schema round trip: id(parameters) -> (parameters, text).
Schemas = dict[int, tuple[object, str]]

# A schema with more brackets than this may nest past MAX_NESTING inside its content
# (which adds a few levels): the JSON key's path names where, so it is used instead.
_BRACKETS_LIMIT: Final = MAX_NESTING - 8

#: The fields :func:`content_key` reads, by class (checked against the dataclasses).
KEYED_FIELDS: Final = {
    SystemContent: (
        "model_identity",
        "reasoning_effort",
        "conversation_start_date",
        "knowledge_cutoff",
        "channel_config",
        "tools",
    ),
    DeveloperContent: ("instructions", "tools", "response_formats"),
    ChannelConfig: ("valid_channels", "channel_required"),
    ToolNamespaceConfig: ("name", "description", "tools"),
    ToolDescription: ("name", "description", "parameters"),
}


def content_key(
    part: SystemContent | DeveloperContent, has_function_tools: bool, typescript: str
) -> tuple[tuple[object, ...], Schemas] | None:
    """The content's cache key and its tools' parameters texts, or ``None``."""
    schemas: Schemas = {}
    if type(part) is SystemContent:
        identity, date, cutoff = (
            part.model_identity,
            part.conversation_start_date,
            part.knowledge_cutoff,
        )
        if not (_text_or_none(identity) and _text_or_none(date) and _text_or_none(cutoff)):
            return None
        effort = part.reasoning_effort
        if effort is not None and type(effort) is not ReasoningEffort:
            return None
        channels = _channels_key(part.channel_config)
        tools = _tools_key(part.tools, schemas)
        if channels is False or tools is False:
            return None
        key = ("system", has_function_tools, typescript, identity, effort, date, cutoff)
        return (*key, channels, tools), schemas
    if type(part) is DeveloperContent:
        instructions = part.instructions
        if part.response_formats is not None or not _text_or_none(instructions):
            return None
        tools = _tools_key(part.tools, schemas)
        if tools is False:
            return None
        return ("developer", typescript, instructions, tools), schemas
    return None


def _text_or_none(value: object) -> bool:
    return value is None or type(value) is str


def _channels_key(config: ChannelConfig | None) -> object:
    """``(channels, required)``, ``None`` for no config, ``False`` when not plain."""
    if config is None:
        return None
    if type(config) is not ChannelConfig:
        return False
    channels, required = config.valid_channels, config.channel_required
    if type(required) is not bool or type(channels) is not list:
        return False
    if any(type(channel) is not str for channel in channels):
        return False
    return (tuple(channels), required)


def _tools_key(tools: dict[str, ToolNamespaceConfig] | None, schemas: Schemas) -> object:
    """The namespaces as nested tuples, ``None`` for none, ``False`` when not plain."""
    if tools is None:
        return None
    if type(tools) is not dict:
        return False
    out: list[object] = []
    for key, ns in tools.items():
        if type(key) is not str or type(ns) is not ToolNamespaceConfig:
            return False
        name, description, members = ns.name, ns.description, ns.tools
        if type(name) is not str or not _text_or_none(description) or type(members) is not list:
            return False
        declared: list[object] = [key, name, description]
        for tool in members:
            if type(tool) is not ToolDescription:
                return False
            parameters = tool.parameters
            text = None
            if parameters is not None:
                text = _parameters_text(parameters)
                if text is None:
                    return False
                schemas[id(parameters)] = (parameters, text)
            if type(tool.name) is not str or type(tool.description) is not str:
                return False
            declared += (tool.name, tool.description, text)
        out.append(tuple(declared))
    return tuple(out)


def _parameters_text(parameters: object) -> str | None:
    """``json.dumps(parameters)``, or ``None`` when the JSON key must answer instead."""
    try:
        text = write_json(parameters)
    except (TypeError, ValueError, RecursionError):
        return None  # the JSON key's path reports it as before
    if text.count("{") + text.count("[") > _BRACKETS_LIMIT:
        return None
    return text
