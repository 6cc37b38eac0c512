"""Building the harmony messages of a conversation's history.

Both APIs describe history as user texts, assistant texts, reasoning, tool calls
(with ids) and tool results (naming the call id). Harmony has no ids: a call is a
message to ``functions.<name>`` and a result is a message *from*
``functions.<name>``. :class:`Transcript` pairs them by id and writes the
results of a run of tool results in the order of their calls, so the n-th
result the model reads answers the n-th call, whatever order the client sent
them in (two calls to the same function stay distinguishable).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._content import TextContent
from .._enums import Role
from .._message import Author, Message
from .._names import ANALYSIS, ASSISTANT
from .._turn import call_header
from ._errors import ToolCallMatchError


@dataclass(frozen=True, slots=True)
class _Call:
    seq: int
    recipient: str
    channel: str
    path: str


class Transcript:
    """Collects history messages; see the module docstring.

    >>> t = Transcript()
    >>> t.call("a", "functions.f", "{}", "m[0].tool_calls[0]")
    >>> t.call("b", "functions.g", "{}", "m[0].tool_calls[1]")
    >>> t.result("b", "B", "m[2]")
    >>> t.result("a", "A", "m[1]")
    >>> [(m.author.name, m.text) for m in t.finish()[2:]]
    [('functions.f', 'A'), ('functions.g', 'B')]
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._calls: dict[str, _Call] = {}
        self._answered: dict[str, str] = {}
        self._pending: list[tuple[int, Message]] = []

    def _add(self, message: Message) -> None:
        self._flush()
        self.messages.append(message)

    def _flush(self) -> None:
        if self._pending:
            self._pending.sort(key=lambda pair: pair[0])
            self.messages += [m for _, m in self._pending]
            self._pending = []

    def user(self, text: str) -> None:
        self._add(Message.from_role_and_content(Role.USER, text))

    def assistant_text(self, text: str, channel: str) -> None:
        """An assistant text: ``final`` (an answer) or ``commentary`` (a preamble)."""
        if text:
            self._add(Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel))

    def reasoning(self, text: str) -> None:
        self.assistant_text(text, ANALYSIS)

    def call(self, call_id: str, recipient: str, arguments: str, path: str) -> None:
        """A tool call; ``path`` locates its id in the request (for errors)."""
        if call_id in self._calls:
            first = self._calls[call_id].path
            raise ToolCallMatchError(
                f"tool call id {call_id!r} is used twice (first at {first})", path
            )
        channel, content_type = call_header(recipient)
        self._calls[call_id] = _Call(len(self._calls), recipient, channel, path)
        message = Message.from_role_and_content(Role.ASSISTANT, arguments)
        self._add(
            message.with_channel(channel).with_recipient(recipient).with_content_type(content_type)
        )

    def result(self, call_id: str, output: str, path: str) -> None:
        """The result of call ``call_id``; ``path`` locates the id in the request."""
        call = self._calls.get(call_id)
        if call is None:
            raise ToolCallMatchError(
                f"tool result for call id {call_id!r}, but no earlier tool call has that id", path
            )
        if call_id in self._answered:
            raise ToolCallMatchError(
                f"a second tool result for call id {call_id!r} (first at "
                f"{self._answered[call_id]})",
                path,
            )
        self._answered[call_id] = path
        message = Message(Author(Role.TOOL, call.recipient), [TextContent(output)])
        message.with_recipient(ASSISTANT).with_channel(call.channel)
        self._pending.append((call.seq, message))

    def finish(self) -> list[Message]:
        self._flush()
        return self.messages
