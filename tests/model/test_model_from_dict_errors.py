"""``from_dict`` and enum coercion refuse bad JSON with an InputError naming the field."""

from __future__ import annotations

import pytest

from harmonia import (
    Conversation,
    InputError,
    Message,
    ReasoningEffort,
    Role,
    SystemContent,
    ToolDescription,
    ToolNamespaceConfig,
)


def test_unknown_role_keeps_the_reference_words_and_lists_the_roles() -> None:
    with pytest.raises(InputError) as info:
        Role("wizard")
    assert str(info.value) == (
        "Unknown role: 'wizard' (use one of: user, assistant, system, developer, tool)"
    )
    with pytest.raises(InputError, match=r"^messages\[1\]\.role: Unknown role: 'wizard'"):
        Conversation.from_dict(
            {"messages": [{"role": "user", "content": "x"}, {"role": "wizard", "content": "x"}]}
        )


def test_reasoning_effort_enum_is_strict_and_system_content_takes_any_case() -> None:
    # openai_harmony's enum and pydantic model accept only "Low", "Medium", "High";
    # the enum stays as strict, SystemContent also takes other cases (a harmonia extension).
    with pytest.raises(InputError) as info:
        ReasoningEffort("high")
    assert str(info.value) == (
        "Unknown reasoning effort: 'high' (use one of: 'Low', 'Medium', 'High'); "
        "write 'High' (harmony JSON spells it capitalised)"
    )
    with pytest.raises(InputError, match=r"one of 'low', 'medium', 'high', not 'max'"):
        SystemContent.from_dict({"reasoning_effort": "max"})
    assert SystemContent.from_dict({"reasoning_effort": "high"}).reasoning_effort is (
        ReasoningEffort.HIGH
    )
    assert SystemContent.from_dict({"reasoning_effort": "High"}).reasoning_effort is (
        ReasoningEffort.HIGH
    )


def test_missing_fields_are_named() -> None:
    with pytest.raises(InputError, match=r"^message has no 'content' field: add one$"):
        Message.from_dict({"role": "tool", "name": "functions.f"})
    with pytest.raises(InputError, match=r"^messages\[0\] has no 'role' field: add one$"):
        Conversation.from_dict([{"content": "x"}])
    with pytest.raises(InputError, match=r"^a tool has no 'name' field: add one$"):
        ToolDescription.from_dict({"description": "d"})
    with pytest.raises(InputError, match=r"^tool 'f' has no 'description' field: add one$"):
        ToolDescription.from_dict({"name": "f"})
    with pytest.raises(InputError, match=r"^a tool namespace has no 'name' field: add one$"):
        ToolNamespaceConfig.from_dict({"tools": []})
    with pytest.raises(
        InputError, match=r"^messages\[0\]\.content\[1\]: a text part has no 'text' field"
    ):
        Conversation.from_dict(
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]}]
        )
    with pytest.raises(InputError, match=r"^messages\[0\] must be a JSON object, not str$"):
        Conversation.from_dict(["hi"])
    with pytest.raises(InputError, match=r"^message\.content must be a string or a list"):
        Message.from_dict({"role": "user", "content": 3})
