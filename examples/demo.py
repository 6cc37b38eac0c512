"""`make demo`: render the guide's weather-tool conversation and parse a completion.

Runs offline: the vocabulary ships inside the quicktok package. The command-line
part prints commands that run as shown (their input comes on standard input).
"""

from __future__ import annotations

import io
import sys

from harmonia import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncodingName,
    Message,
    ReasoningEffort,
    Role,
    StreamableParser,
    SystemContent,
    ToolDescription,
    load_harmony_encoding,
)
from harmonia._cli.main import main as cli

# The completion in the guide's StreamableParser example.
GUIDE_COMPLETION = [
    200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 220, 17, 659, 220, 17, 16842, 12295,
    81645, 13, 51441, 6052, 13, 200007, 200006, 173781, 200005, 17196, 200008, 17, 659, 220, 17,
    314, 220, 19, 13, 200002,
]  # fmt: skip


def weather_conversation() -> Conversation:
    system = (
        SystemContent.new()
        .with_reasoning_effort(ReasoningEffort.HIGH)
        .with_conversation_start_date("2025-06-28")
    )
    developer = (
        DeveloperContent.new()
        .with_instructions("Always respond in riddles")
        .with_function_tools(
            [
                ToolDescription.new(
                    "get_current_weather",
                    "Gets the current weather in the provided location.",
                    parameters={
                        "type": "object",
                        "properties": {
                            "location": {
                                "type": "string",
                                "description": "The city and state, e.g. San Francisco, CA",
                            },
                            "format": {
                                "type": "string",
                                "enum": ["celsius", "fahrenheit"],
                                "default": "celsius",
                            },
                        },
                        "required": ["location"],
                    },
                )
            ]
        )
    )
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, system),
            Message.from_role_and_content(Role.DEVELOPER, developer),
            Message.from_role_and_content(Role.USER, "What is the weather in Tokyo?"),
            Message.from_role_and_content(
                Role.ASSISTANT,
                'User asks: "What is the weather in Tokyo?" '
                "We need to use get_current_weather tool.",
            ).with_channel("analysis"),
            Message.from_role_and_content(Role.ASSISTANT, '{"location": "Tokyo"}')
            .with_channel("commentary")
            .with_recipient("functions.get_current_weather")
            .with_content_type("<|constrain|>json"),
            Message.from_author_and_content(
                Author.new(Role.TOOL, "functions.get_current_weather"),
                '{ "temperature": 20, "sunny": true }',
            )
            .with_channel("commentary")
            .with_recipient("assistant"),
        ]
    )


def main() -> None:
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)

    tokens = enc.render_conversation_for_completion(weather_conversation(), Role.ASSISTANT)
    print("== Prompt text ==")
    print(enc.decode_utf8(tokens))
    print(f"\n== Token ids ({len(tokens)}) ==")
    print(tokens)

    print("\n== Parsed completion ==")
    print("tokens:", GUIDE_COMPLETION)
    for message in enc.parse_messages_from_completion_tokens(GUIDE_COMPLETION, Role.ASSISTANT):
        print(f"  {message.author.role.value} [{message.channel}]: {message.text!r}")

    print("\n== Streamed, delta by delta (the final channel) ==")
    parser = StreamableParser(enc, Role.ASSISTANT)
    deltas = []
    for token in GUIDE_COMPLETION:
        parser.process(token)
        if parser.current_channel == "final" and parser.last_content_delta:
            deltas.append(parser.last_content_delta)
    print(" ", deltas)

    print("\n== The command line ==")
    # make demo installs harmonia into .venv without activating it: say how to get
    # the command, since these lines are meant to be typed in a shell.
    print(
        "(`harmonia` is on PATH where harmonia is installed: after `make demo`, run\n"
        " `. .venv/bin/activate` first, or type `.venv/bin/harmonia` for `harmonia`)"
    )
    ids = " ".join(map(str, GUIDE_COMPLETION))
    shell(f"echo {ids} | harmonia inspect -", ["inspect", "-", "--color", "never"], ids)
    tool_call = (
        "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_current_weather "
        '<|constrain|>json<|message|>{"location":"San Francisco"}<|call|>'
    )
    shell(f"echo '{tool_call}' | harmonia parse -", ["parse", "-"], tool_call + "\n")
    print("(harmonia inspect FILE --html out.html writes the same view as a web page)")


def shell(line: str, argv: list[str], stdin: str) -> None:
    """Show a command line, then run it in this process with ``stdin`` as its input."""
    print(f"$ {line}")
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        cli(argv)
    finally:
        sys.stdin = saved


if __name__ == "__main__":
    main()
