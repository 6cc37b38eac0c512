"""A tool and a conversation builder shared by the grammar and mask tests.

A plain module, imported by name: pytest's prepend import mode puts each test
file's folder first on ``sys.path`` (there is no ``tests/__init__.py``); the name is
unique across tests/, and it is not collected as a test file.
"""

from __future__ import annotations

import pytest

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


def _llguidance_line() -> tuple[int, int]:
    from harmonia.constrained._grammar import installed_llguidance

    return installed_llguidance()


#: For tests of what only llguidance 1.9 does: \uXXXX escapes of any character in
#: JSON strings (1.7, which vLLM 0.32/0.33 ship, allows only control characters
#: escaped that way, and has no setting for more), and a panic 1.9 has.
needs_llguidance_1_9 = pytest.mark.skipif(
    _llguidance_line() < (1, 9),
    reason="llguidance < 1.9 is installed: it allows \\uXXXX escapes only for control "
    "characters (and lacks the 1.9 behaviour this test pins)",
)
