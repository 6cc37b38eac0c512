"""Starting a conversation whose system and developer messages declare a toolbox."""

from __future__ import annotations

import copy

from harmonia import Conversation, DeveloperContent, Message, ReasoningEffort, Role, SystemContent
from harmonia.tools import Toolbox


def new_conversation(
    user: str | None = None,
    *,
    toolbox: Toolbox | None = None,
    instructions: str | None = None,
    reasoning_effort: ReasoningEffort | str | None = None,
    system: SystemContent | None = None,
) -> Conversation:
    """A system message (built-in tools), a developer message (instructions, functions), a user.

    The built-in namespaces of ``toolbox`` (``browser``, ``python``) go in the
    system message and the others in the developer message, as the harmony
    guide places them. ``system`` replaces the default ``SystemContent.new()``
    (tools are added to it, never to the caller's object in place).

    >>> chat = new_conversation("What is 6 * 7?", reasoning_effort="low")
    >>> [m.author.role.value for m in chat.messages]
    ['system', 'user']
    >>> chat.messages[0].content[0].reasoning_effort.value
    'Low'
    """
    # SystemContent's with_* methods change it in place: work on a copy of the caller's.
    content = copy.deepcopy(system) if system is not None else SystemContent.new()
    if reasoning_effort is not None:
        effort = (
            reasoning_effort
            if isinstance(reasoning_effort, ReasoningEffort)
            else ReasoningEffort(str(reasoning_effort).capitalize())
        )
        content = content.with_reasoning_effort(effort)
    developer = DeveloperContent.new()
    if instructions:
        developer = developer.with_instructions(instructions)
    for namespace in toolbox.system_tools() if toolbox is not None else ():
        content = content.with_tools(namespace)
    functions = list(toolbox.developer_tools()) if toolbox is not None else []
    for namespace in functions:
        developer = developer.with_tools(namespace)
    messages = [Message.from_role_and_content(Role.SYSTEM, content)]
    if instructions or functions:
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    if user is not None:
        messages.append(Message.from_role_and_content(Role.USER, user))
    return Conversation.from_messages(messages)
