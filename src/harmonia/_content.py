"""Message contents: text, the system content and the developer content.

Plain dataclasses, not pydantic: no validation round trip on every call. The
``with_*`` builders follow the reference exactly: they modify the object and
return it, so chained code written for ``openai_harmony`` behaves the same.
``to_dict``/``from_dict`` read and write the reference's JSON shapes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._builtin_tools import BROWSER_DESCRIPTION, BROWSER_TOOLS, PYTHON_DESCRIPTION
from ._enums import ReasoningEffort
from ._errors import InputError
from ._names import BROWSER, CHANNELS, FUNCTIONS, PYTHON

DEFAULT_MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
DEFAULT_KNOWLEDGE_CUTOFF = "2024-06"
DEFAULT_REASONING_EFFORT = ReasoningEffort.MEDIUM
DEFAULT_CHANNELS = CHANNELS


class Content:
    """Base class of every content part."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(slots=True)
class TextContent(Content):
    """Plain text.

    >>> TextContent(text="hi").to_dict()
    {'type': 'text', 'text': 'hi'}
    """

    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(slots=True)
class ToolDescription:
    """One function a tool namespace offers; ``parameters`` is a JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # As the reference (pydantic) does; a name that is a string but cannot be
        # declared (empty, with spaces) is refused when the tool is rendered.
        for field_name in ("name", "description"):
            value = getattr(self, field_name)
            if not isinstance(value, str):
                raise InputError(
                    f"ToolDescription.{field_name} must be a string, not {type(value).__name__}"
                )

    @classmethod
    def new(
        cls, name: str, description: str, parameters: dict[str, Any] | None = None
    ) -> ToolDescription:
        return cls(name=name, description=description, parameters=parameters)

    def to_dict(self) -> dict[str, Any]:
        return set_fields(name=self.name, description=self.description, parameters=self.parameters)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ToolDescription:
        name = required(raw, "name", "a tool")
        return cls(name, required(raw, "description", f"tool {name!r}"), raw.get("parameters"))


@dataclass(slots=True)
class ToolNamespaceConfig:
    """A namespace of tools (``functions``, ``browser``, ``python``, ...)."""

    name: str
    description: str | None = None
    tools: list[ToolDescription] = field(default_factory=list)

    @staticmethod
    def browser() -> ToolNamespaceConfig:
        """The built-in browsing tool, with the texts gpt-oss was trained on."""
        tools = [ToolDescription(n, d, copy.deepcopy(p)) for n, d, p in BROWSER_TOOLS]
        return ToolNamespaceConfig(BROWSER, BROWSER_DESCRIPTION, tools)

    @staticmethod
    def python() -> ToolNamespaceConfig:
        """The built-in Python tool (a description, no typed functions)."""
        return ToolNamespaceConfig(PYTHON, PYTHON_DESCRIPTION, [])

    def to_dict(self) -> dict[str, Any]:
        tools = [t.to_dict() for t in self.tools]
        return {"name": self.name, **set_fields(description=self.description), "tools": tools}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ToolNamespaceConfig:
        name = required(raw, "name", "a tool namespace")
        return cls(name, raw.get("description"), [_tool(t) for t in raw.get("tools", [])])


def set_fields(**fields: Any) -> dict[str, Any]:
    """The fields that are not ``None``: the reference's JSON leaves those out."""
    return {key: value for key, value in fields.items() if value is not None}


def required(raw: Mapping[str, Any], key: str, what: str) -> Any:
    """``raw[key]`` of a JSON object, or an :class:`InputError` naming what is missing."""
    if not isinstance(raw, Mapping):
        raise InputError(f"{what} must be a JSON object, not {type(raw).__name__}")
    if key not in raw:
        raise InputError(f"{what} has no {key!r} field: add one")
    return raw[key]


def _tool(raw: ToolDescription | Mapping[str, Any]) -> ToolDescription:
    return raw if isinstance(raw, ToolDescription) else ToolDescription.from_dict(raw)


def _namespace(raw: ToolNamespaceConfig | Mapping[str, Any]) -> ToolNamespaceConfig:
    return raw if isinstance(raw, ToolNamespaceConfig) else ToolNamespaceConfig.from_dict(raw)


@dataclass(slots=True)
class ChannelConfig:
    """The channels the system message declares, and whether one is required."""

    valid_channels: list[str]
    channel_required: bool

    @classmethod
    def require_channels(cls, channels: Iterable[str]) -> ChannelConfig:
        return cls(valid_channels=list(channels), channel_required=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "valid_channels": list(self.valid_channels),
            "channel_required": self.channel_required,
        }

    @classmethod
    def from_dict(cls, raw: ChannelConfig | Mapping[str, Any]) -> ChannelConfig:
        if isinstance(raw, ChannelConfig):
            return raw
        return cls(list(raw["valid_channels"]), bool(raw["channel_required"]))


def _tools_to_dict(tools: dict[str, ToolNamespaceConfig] | None) -> dict[str, Any] | None:
    return None if tools is None else {key: ns.to_dict() for key, ns in tools.items()}


def _tools_from_dict(raw: Mapping[str, Any] | None) -> dict[str, ToolNamespaceConfig] | None:
    if raw is None:
        return None
    return {key: _namespace(ns) for key, ns in raw.items()}


@dataclass(slots=True)
class SystemContent(Content):
    """The system message: identity, dates, reasoning effort, channels, built-in tools.

    >>> s = SystemContent.new().with_reasoning_effort(ReasoningEffort.HIGH)
    >>> s.reasoning_effort, s.knowledge_cutoff
    (<ReasoningEffort.HIGH: 'High'>, '2024-06')
    """

    model_identity: str | None = DEFAULT_MODEL_IDENTITY
    reasoning_effort: ReasoningEffort | None = DEFAULT_REASONING_EFFORT
    conversation_start_date: str | None = None
    knowledge_cutoff: str | None = DEFAULT_KNOWLEDGE_CUTOFF
    channel_config: ChannelConfig | None = field(
        default_factory=lambda: ChannelConfig.require_channels(DEFAULT_CHANNELS)
    )
    tools: dict[str, ToolNamespaceConfig] | None = None

    TYPE: ClassVar[str] = "system_content"

    def __post_init__(self) -> None:
        if self.reasoning_effort is not None:
            self.reasoning_effort = _reasoning_effort(self.reasoning_effort)

    @classmethod
    def new(cls) -> SystemContent:
        return cls()

    def with_model_identity(self, model_identity: str) -> SystemContent:
        self.model_identity = model_identity
        return self

    def with_reasoning_effort(self, effort: ReasoningEffort | str | None) -> SystemContent:
        """Set the effort: a :class:`ReasoningEffort`, its name in any case (``"high"``)
        or ``None`` (no ``Reasoning:`` line).

        >>> SystemContent.new().with_reasoning_effort("high").reasoning_effort
        <ReasoningEffort.HIGH: 'High'>
        """
        self.reasoning_effort = None if effort is None else _reasoning_effort(effort)
        return self

    def with_conversation_start_date(self, date: str) -> SystemContent:
        self.conversation_start_date = date
        return self

    def with_knowledge_cutoff(self, cutoff: str) -> SystemContent:
        self.knowledge_cutoff = cutoff
        return self

    def with_channel_config(self, channel_config: ChannelConfig) -> SystemContent:
        self.channel_config = channel_config
        return self

    def with_required_channels(self, channels: Iterable[str]) -> SystemContent:
        self.channel_config = ChannelConfig.require_channels(channels)
        return self

    def with_tools(self, namespace: ToolNamespaceConfig) -> SystemContent:
        if self.tools is None:
            self.tools = {}
        self.tools[namespace.name] = namespace
        return self

    def with_browser_tool(self) -> SystemContent:
        return self.with_tools(ToolNamespaceConfig.browser())

    def with_python_tool(self) -> SystemContent:
        return self.with_tools(ToolNamespaceConfig.python())

    def to_dict(self) -> dict[str, Any]:
        channels = self.channel_config
        return set_fields(
            model_identity=self.model_identity,
            reasoning_effort=self.reasoning_effort,
            conversation_start_date=self.conversation_start_date,
            knowledge_cutoff=self.knowledge_cutoff,
            channel_config=None if channels is None else channels.to_dict(),
            tools=_tools_to_dict(self.tools),
            type=self.TYPE,
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SystemContent:
        # Missing keys take the defaults, as pydantic does in the reference.
        out = cls()
        for key in ("model_identity", "conversation_start_date", "knowledge_cutoff"):
            if key in raw:
                setattr(out, key, raw[key])
        if "reasoning_effort" in raw:
            effort = raw["reasoning_effort"]
            out.reasoning_effort = None if effort is None else _reasoning_effort(effort)
        if "channel_config" in raw:
            cc = raw["channel_config"]
            out.channel_config = None if cc is None else ChannelConfig.from_dict(cc)
        if "tools" in raw:
            out.tools = _tools_from_dict(raw["tools"])
        return out


def _reasoning_effort(value: object) -> ReasoningEffort:
    """A ReasoningEffort from itself or its name in any case; InputError otherwise."""
    if isinstance(value, ReasoningEffort):
        return value
    if isinstance(value, str):
        for effort in ReasoningEffort:
            if value.lower() == effort.value.lower():
                return effort
    names = ", ".join(repr(effort.value.lower()) for effort in ReasoningEffort)
    raise InputError(f"reasoning_effort must be a ReasoningEffort or one of {names}, not {value!r}")


@dataclass(slots=True)
class ResponseFormat:
    """A structured-output format declared in the developer message (harmonia extension).

    ``schema`` is a JSON Schema; it is written as compact JSON under
    ``# Response Formats`` as the harmony guide shows.
    """

    name: str
    schema: dict[str, Any]
    description: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **set_fields(description=self.description),
            "schema": self.schema,
        }

    @classmethod
    def from_dict(cls, raw: ResponseFormat | Mapping[str, Any]) -> ResponseFormat:
        if isinstance(raw, ResponseFormat):
            return raw
        return cls(raw["name"], raw["schema"], raw.get("description"))


@dataclass(slots=True)
class DeveloperContent(Content):
    """The developer message: instructions (the "system prompt") and function tools.

    >>> d = DeveloperContent.new().with_instructions("Be brief")
    >>> d.to_dict()
    {'instructions': 'Be brief', 'type': 'developer_content'}
    """

    instructions: str | None = None
    tools: dict[str, ToolNamespaceConfig] | None = None
    #: harmonia extension: ``# Response Formats`` entries (omitted from JSON when None).
    response_formats: list[ResponseFormat] | None = None

    TYPE: ClassVar[str] = "developer_content"

    @classmethod
    def new(cls) -> DeveloperContent:
        return cls()

    def with_instructions(self, instructions: str) -> DeveloperContent:
        self.instructions = instructions
        return self

    def with_tools(self, namespace: ToolNamespaceConfig) -> DeveloperContent:
        if self.tools is None:
            self.tools = {}
        self.tools[namespace.name] = namespace
        return self

    def with_function_tools(self, tools: Iterable[ToolDescription]) -> DeveloperContent:
        return self.with_tools(ToolNamespaceConfig(FUNCTIONS, None, list(tools)))

    def with_response_format(
        self, name: str, schema: dict[str, Any], description: str | None = None
    ) -> DeveloperContent:
        """Declare a structured-output format (rendered under ``# Response Formats``).

        >>> d = DeveloperContent.new().with_response_format("answer", {"type": "object"})
        >>> d.response_formats[0].name
        'answer'
        """
        fmt = ResponseFormat(name, schema, description)
        others = [f for f in self.response_formats or [] if f.name != name]
        self.response_formats = [*others, fmt]
        return self

    def to_dict(self) -> dict[str, Any]:
        formats = self.response_formats
        return set_fields(
            instructions=self.instructions,
            tools=_tools_to_dict(self.tools),
            response_formats=None if formats is None else [f.to_dict() for f in formats],
            type=self.TYPE,
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeveloperContent:
        formats = raw.get("response_formats")
        return cls(
            raw.get("instructions"),
            _tools_from_dict(raw.get("tools")),
            None if formats is None else [ResponseFormat.from_dict(f) for f in formats],
        )


def content_from_dict(raw: Content | Mapping[str, Any]) -> Content:
    """One content part from its JSON form (dispatch on ``type``)."""
    if isinstance(raw, Content):
        return raw
    kind = raw.get("type") if isinstance(raw, Mapping) else None
    if kind == "text":
        return TextContent(required(raw, "text", "a text part"))
    if kind == SystemContent.TYPE:
        return SystemContent.from_dict(raw)
    if kind == DeveloperContent.TYPE:
        return DeveloperContent.from_dict(raw)
    raise InputError(f"Unknown content variant: {raw}")
