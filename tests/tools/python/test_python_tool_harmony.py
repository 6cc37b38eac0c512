"""The python tool inside the harmony format: its declaration and a call's round trip."""

from __future__ import annotations

from typing import Any

import harmonia
from harmonia import Author, Message, Role
from harmonia.tools import ToolCall
from harmonia.tools.python import PythonTool, PythonToolConfig

# The declaration gpt-oss was trained on (the harmony guide's python tool text, as
# `with_python_tool()` renders it), written out here as an independent reference.
TRAINED = (
    "Use this tool to execute Python code in your chain of thought. The code will not be shown "
    "to the user. This tool should be used for internal reasoning, but not for code that is "
    "intended to be visible to the user (e.g. when creating plots, tables, or files).\n\n"
    "When you send a message containing Python code to python, it will be executed in a "
    "stateful Jupyter notebook environment. python will respond with the output of the "
    "execution or time out after 120.0 seconds. The drive at '/mnt/data' can be used to save "
    "and persist user files. Internet access for this session is UNKNOWN. Depends on the "
    "cluster."
)


def test_default_declaration_is_the_trained_text_except_that_internet_is_disabled(
    sandbox: None,
) -> None:
    config = PythonTool().namespace_config()
    assert config.name == "python"
    assert config.tools == []
    expected = TRAINED.replace(
        "Internet access for this session is UNKNOWN. Depends on the cluster.",
        "Internet access for this session is disabled.",
    )
    assert config.description == expected


def test_declaration_states_the_configured_timeout(sandbox: None) -> None:
    description = PythonTool(PythonToolConfig(timeout=2.5)).namespace_config().description
    assert description is not None
    assert "time out after 2.5 seconds." in description
    assert "120.0" not in description


def test_harmony_round_trip_of_a_python_call(
    enc: harmonia.HarmonyEncoding, shared: Any, aio: Any
) -> None:
    completion = "<|channel|>analysis to=python code<|message|>print(1)<|call|>"
    [message] = harmonia.parse_completion(enc, completion, Role.ASSISTANT).messages
    assert (message.recipient, message.channel, message.content_type) == (
        "python",
        "analysis",
        "code",
    )
    call = ToolCall(
        recipient="python",
        namespace="python",
        name=None,
        arguments=message.text,
        channel=message.channel,
        content_type=message.content_type,
    )
    output = aio.run(shared.call(call))
    assert output.text == "1\n"
    reply = (
        Message.from_author_and_content(Author.new(Role.TOOL, "python"), output.text)
        .with_recipient("assistant")
        .with_channel(call.channel)
    )
    rendered = enc.decode(enc.render(reply))
    assert rendered == "<|start|>python to=assistant<|channel|>analysis<|message|>1\n<|end|>"
