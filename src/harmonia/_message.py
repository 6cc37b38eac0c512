"""Authors, messages, conversations, and the render configuration objects."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ._content import Content, TextContent, content_from_dict, required, set_fields
from ._enums import Role
from ._errors import InputError
from ._names import CotPolicyName, TypeScriptMode


def _dumps(value: object) -> str:
    try:
        return json.dumps(value)
    except RecursionError:
        # json.dumps recurses once per level; thousands of levels exhaust the stack.
        raise InputError(
            "the value nests too deeply to be written as JSON (some tool schema "
            "is thousands of levels deep); flatten it"
        ) from None


#: How tool schemas become TypeScript: "reference" (byte-exact) or "corrected".
DEFAULT_TYPESCRIPT_MODE: Final[TypeScriptMode] = "reference"


@dataclass(slots=True)
class Author:
    """A message's author: a role, and for tools the tool's name.

    >>> Author.new(Role.TOOL, "functions.get_weather")
    Author(role=<Role.TOOL: 'tool'>, name='functions.get_weather')
    """

    role: Role
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.role, Role):
            self.role = Role(self.role)

    @classmethod
    def new(cls, role: Role, name: str | None = None) -> Author:
        return cls(role, name)


def _as_content(content: Content | str) -> Content:
    if isinstance(content, str):
        return TextContent(content)
    if not isinstance(content, Content):
        raise InputError(
            f"message content must be a str or a Content, not {type(content).__name__}"
        )
    return content


@dataclass(slots=True)
class Message:
    """One harmony message: author, content parts, and header fields.

    >>> m = Message.from_role_and_content(Role.ASSISTANT, "{}").with_channel("commentary")
    >>> m.with_recipient("functions.f") is m   # builders modify and return the same object
    True
    """

    author: Author
    content: list[Content] = field(default_factory=list)
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None

    @classmethod
    def from_author_and_content(cls, author: Author, content: Content | str) -> Message:
        return cls(author, [_as_content(content)])

    @classmethod
    def from_role_and_content(cls, role: Role, content: Content | str) -> Message:
        return cls(Author(role), [_as_content(content)])

    @classmethod
    def from_role_and_contents(cls, role: Role, contents: Iterable[Content | str]) -> Message:
        return cls(Author(role), [_as_content(c) for c in contents])

    def adding_content(self, content: Content | str) -> Message:
        self.content.append(_as_content(content))
        return self

    def with_channel(self, channel: str) -> Message:
        self.channel = channel
        return self

    def with_recipient(self, recipient: str) -> Message:
        self.recipient = recipient
        return self

    def with_content_type(self, content_type: str) -> Message:
        self.content_type = content_type
        return self

    @property
    def text(self) -> str:
        """The concatenated text of the message's text parts (a harmonia convenience)."""
        return "".join(c.text for c in self.content if isinstance(c, TextContent))

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.author.role,
            "name": self.author.name,  # null, not left out, as in the reference
            "content": [c.to_dict() for c in self.content],
            **set_fields(
                channel=self.channel, recipient=self.recipient, content_type=self.content_type
            ),
        }

    def to_json(self) -> str:
        return _dumps(self.to_dict())

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Message:
        """Read the reference's message JSON (``content`` may be a plain string).

        Bad input raises :class:`InputError` saying which field is wrong:

        >>> Message.from_dict({"role": "tool", "name": "functions.f"})
        Traceback (most recent call last):
        ...
        harmonia._errors.InputError: message has no 'content' field: add one
        """
        return _message_from_dict(raw, "message")

    @classmethod
    def from_json(cls, text: str) -> Message:
        return cls.from_dict(json.loads(text))


def _message_from_dict(raw: Mapping[str, Any], where: str) -> Message:
    """``Message.from_dict``, with ``where`` (a JSON path) at the front of every error."""
    value = required(raw, "role", where)
    try:
        role = Role(value)
    except InputError as exc:
        raise InputError(f"{where}.role: {exc}") from None
    content = required(raw, "content", where)
    parts: list[Content]
    if isinstance(content, str):
        parts = [TextContent(content)]
    elif isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            try:
                parts.append(content_from_dict(part))
            except InputError as exc:
                raise InputError(f"{where}.content[{j}]: {exc}") from None
    else:
        raise InputError(
            f"{where}.content must be a string or a list of parts, not {type(content).__name__}"
        )
    return Message(
        Author(role, raw.get("name")),
        parts,
        raw.get("channel"),
        raw.get("recipient"),
        raw.get("content_type"),
    )


@dataclass(slots=True)
class Conversation:
    """An ordered list of messages.

    >>> conv = Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")])
    >>> Conversation.from_json(conv.to_json()) == conv
    True
    """

    messages: list[Message] = field(default_factory=list)

    @classmethod
    def from_messages(cls, messages: Iterable[Message]) -> Conversation:
        items = list(messages)
        for i, m in enumerate(items):
            if not isinstance(m, Message):
                raise InputError(
                    f"conversation item {i} is a {type(m).__name__}, not a Message "
                    "(wrap contents with Message.from_role_and_content)"
                )
        return cls(items)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def to_dict(self) -> dict[str, Any]:
        return {"messages": [m.to_dict() for m in self.messages]}

    def to_json(self) -> str:
        return _dumps(self.to_dict())

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | Sequence[Any]) -> Conversation:
        """Read ``{"messages": [...]}`` (or a bare list of messages)."""
        items = raw if isinstance(raw, Sequence) else required(raw, "messages", "a conversation")
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise InputError(f"messages must be a list, not {type(items).__name__}")
        return cls([_message_from_dict(m, f"messages[{i}]") for i, m in enumerate(items)])

    @classmethod
    def from_json(cls, text: str) -> Conversation:
        return cls.from_dict(json.loads(text))


@dataclass(slots=True)
class RenderConversationConfig:
    """How a conversation is rendered.

    ``auto_drop_analysis`` is the reference's switch (``True``: its CoT policy,
    ``False``: keep all). ``cot_policy`` (a harmonia extension) names a policy
    explicitly and wins when given: ``"reference"``, ``"guide"``, ``"keep_all"`` or
    ``"hf"`` (``harmonia.COT_POLICIES``; ``_render/cot.py`` defines each).
    ``typescript`` (also an extension) selects the tool-schema rendering:
    ``"reference"`` (byte-exact, the default) or ``"corrected"``.
    """

    auto_drop_analysis: bool = True
    cot_policy: CotPolicyName | None = None
    typescript: TypeScriptMode = DEFAULT_TYPESCRIPT_MODE


@dataclass(slots=True)
class RenderOptions:
    """Options for rendering a single message."""

    conversation_has_function_tools: bool = False
    typescript: TypeScriptMode = DEFAULT_TYPESCRIPT_MODE
