"""A tool and a conversation builder shared by the grammar and mask tests.

A plain module, imported by name: pytest's prepend import mode puts each test
file's folder first on ``sys.path`` (there is no ``tests/__init__.py``); the name is
unique across tests/, and it is not collected as a test file.
"""

from __future__ import annotations

from harmonia import Conversation, DeveloperContent, Message, Role, SystemContent, ToolDescription

WEATHER = ToolDescription.new(
    "get_weather",
    "Gets the weather.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def conversation(
    system: SystemContent | None = None, developer: DeveloperContent | None = None
) -> Conversation:
    messages = []
    if system is not None:
        messages.append(Message.from_role_and_content(Role.SYSTEM, system))
    if developer is not None:
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    messages.append(Message.from_role_and_content(Role.USER, "Hi"))
    return Conversation.from_messages(messages)
