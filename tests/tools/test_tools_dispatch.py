from __future__ import annotations

import asyncio
from typing import Any

import pytest

import harmonia
from harmonia import Author, InputError, Message, Role, TextContent, ToolNamespaceConfig
from harmonia.tools import Toolbox, ToolCall, is_tool_call, tool_reply

# Sampled calls in every header form the model uses, with what the reply must look like.
# (completion text, expected canonical recipient, expected channel)
HEADER_FORMS = [
    # recipient after the channel, content type code / json / <|constrain|>json
    (
        '<|channel|>analysis to=browser.search code<|message|>{"query":"tides"}<|call|>',
        "browser.search",
        "analysis",
    ),
    (
        '<|channel|>analysis to=browser.open json<|message|>{"id":3}<|call|>',
        "browser.open",
        "analysis",
    ),
    (
        '<|channel|>commentary to=browser.find <|constrain|>json<|message|>{"pattern":"x"}<|call|>',
        "browser.find",
        "commentary",
    ),
    # constrain glued to the recipient
    (
        '<|channel|>analysis to=browser.search<|constrain|>json<|message|>{"query":"a"}<|call|>',
        "browser.search",
        "analysis",
    ),
    # recipient in the role section
    (
        ' to=browser.search<|channel|>analysis code<|message|>{"query":"b"}<|call|>',
        "browser.search",
        "analysis",
    ),
    ("<|channel|>analysis to=python code<|message|>print(1)<|call|>", "python", "analysis"),
    (" to=python<|channel|>analysis<|message|>x = 2<|call|>", "python", "analysis"),
    # the functions.* aliases
    (
        "<|channel|>commentary to=functions.browser.search <|constrain|>json<|message|>"
        '{"query":"c"}<|call|>',
        "browser.search",
        "commentary",
    ),
    (
        "<|channel|>analysis to=functions.python code<|message|>print(2)<|call|>",
        "python",
        "analysis",
    ),
    # a function of the functions namespace
    (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Oslo"}<|call|>',
        "functions.get_weather",
        "commentary",
    ),
    (
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Rome"}<|call|>',
        "functions.get_weather",
        "commentary",
    ),
]


class Weather:
    namespace = "functions"

    def namespace_config(self) -> ToolNamespaceConfig:
        params = {"type": "object", "properties": {"city": {"type": "string"}}}
        return ToolNamespaceConfig(
            "functions", None, [harmonia.ToolDescription("get_weather", "Weather.", params)]
        )

    async def call(self, call: ToolCall) -> Any:
        from harmonia.tools import ToolOutput

        return ToolOutput(f"sunny in {call.arguments}")

    async def aclose(self) -> None:
        pass


@pytest.fixture
def box(fake_browser: Any, fake_python: Any) -> Toolbox:
    return Toolbox([fake_browser, fake_python, Weather()])


def _parse_call(enc: harmonia.HarmonyEncoding, text: str) -> Message:
    tokens = enc.encode(text, allowed_special="all")
    [message] = enc.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT)
    return message


@pytest.mark.parametrize(("completion", "recipient", "channel"), HEADER_FORMS)
def test_round_trip_every_header_form(
    enc: harmonia.HarmonyEncoding, box: Toolbox, completion: str, recipient: str, channel: str
) -> None:
    call = _parse_call(enc, completion)
    assert is_tool_call(call)
    reply = asyncio.run(box.dispatch(call))
    assert reply is not None
    assert reply.author == Author(Role.TOOL, recipient)
    assert reply.recipient == "assistant"
    assert reply.channel == channel
    assert not reply.text.startswith("Error"), reply.text
    tokens = enc.render(reply)
    # the guide's header: <|start|>{tool} to=assistant<|channel|>{channel}<|message|>
    assert enc.decode(tokens).startswith(
        f"<|start|>{recipient} to=assistant<|channel|>{channel}<|message|>"
    )
    assert enc.decode(tokens).endswith("<|end|>")
    assert enc.parse_messages_from_completion_tokens(tokens, role=None) == [reply]


def test_python_call_gets_source_verbatim(
    enc: harmonia.HarmonyEncoding, box: Toolbox, fake_python: Any
) -> None:
    source = 'for i in range(2):\n    print("}{", i)\n'
    call = _parse_call(enc, f"<|channel|>analysis to=python code<|message|>{source}<|call|>")
    reply = box.dispatch_sync(call)
    assert fake_python.sources == [source]
    assert reply is not None and reply.text == f"ran {len(source)} chars (call 1)\n"


def test_alias_keeps_header_fields_in_the_call(box: Toolbox) -> None:
    message = Message(
        Author(Role.ASSISTANT),
        [TextContent('{"query": "q"}')],
        "analysis",
        "functions.browser.search",
        "<|constrain|>json",
    )
    call = box.parse_call(message, call_id="c1")
    assert call == ToolCall(
        "browser.search",
        "browser",
        "search",
        '{"query": "q"}',
        "analysis",
        "<|constrain|>json",
        "c1",
    )


def test_bare_function_name_finds_its_namespace(box: Toolbox) -> None:
    message = Message.from_role_and_content(Role.ASSISTANT, "{}").with_recipient("get_weather")
    assert box.parse_call(message.with_channel("commentary")).recipient == "functions.get_weather"


def test_parse_call_and_is_tool_call_read_alike(box: Toolbox) -> None:
    """One rule: a bare name on no channel is no call for either (the parser reads
    ``to=get_weather`` with no channel as a content type), ``to=user`` neither."""
    calls = 0
    for channel in (None, "analysis", "commentary", "final"):
        for recipient in ("get_weather", "functions.get_weather", "user", "all", "json", "python"):
            # The builders mutate: a new message each time.
            message = Message.from_role_and_content(Role.ASSISTANT, "{}").with_recipient(recipient)
            if channel is not None:
                message = message.with_channel(channel)
            if is_tool_call(message):
                box.parse_call(message)
                calls += 1
            else:
                with pytest.raises(InputError, match="is not a tool call"):
                    box.parse_call(message)
    bare = Message.from_role_and_content(Role.ASSISTANT, "{}").with_recipient("get_weather")
    assert not is_tool_call(bare)
    assert calls == 4 + 4 + 2  # functions.f and python anywhere, the bare name on two channels


def _ask(box: Toolbox, recipient: str, body: str, channel: str = "analysis") -> Message:
    message = Message.from_role_and_content(Role.ASSISTANT, body).with_recipient(recipient)
    reply = box.dispatch_sync(message.with_channel(channel))
    assert reply is not None
    return reply


def test_unknown_tool_lists_the_valid_ones(box: Toolbox) -> None:
    reply = _ask(box, "browser.search_web", "{}")
    assert reply.author.name == "browser.search_web"
    assert "no function 'search_web'" in reply.text
    reply = _ask(box, "calculator.add", "{}")
    assert reply.text.startswith("Error: there is no tool 'calculator.add'.")
    for name in (
        "browser.search",
        "browser.open",
        "browser.find",
        "python",
        "functions.get_weather",
    ):
        assert name in reply.text


def test_invalid_json_reply_gives_the_position(box: Toolbox) -> None:
    reply = _ask(box, "browser.search", '{"query": "a",}')
    assert "not valid JSON" in reply.text
    assert "line 1 column 15" in reply.text
    assert '"query"' in reply.text  # the schema the model should follow


def test_schema_violation_reply_quotes_the_path(box: Toolbox) -> None:
    reply = _ask(box, "browser.search", '{"query": 5}')
    assert "at $.query: 5 is not of type 'string'" in reply.text
    reply = _ask(box, "browser.find", "{}")
    assert "'pattern' is a required property" in reply.text


def test_exceptions_timeouts_and_refusals_become_replies(misbehaving: Any) -> None:
    box = Toolbox([misbehaving], timeout=0.05)
    reply = _ask(box, "broken.crash", "{}", channel="commentary")
    assert reply.text == "Error: broken.crash failed: KeyError: 'secret-free detail'"
    assert reply.channel == "commentary"
    assert _ask(box, "broken.refuse", "").text == "Error: refused: try 'sleep' instead"
    reply = _ask(box, "broken.sleep", "")
    assert reply.text.startswith("Error: broken.sleep did not answer within 0.05 seconds")


def test_per_namespace_timeout_overrides(misbehaving: Any) -> None:
    box = Toolbox(timeout=30)
    box.add(misbehaving, timeout=0.01)
    assert "did not answer within 0.01 seconds" in _ask(box, "broken.sleep", "").text


def test_declared_namespace_is_left_to_the_caller(box: Toolbox) -> None:
    tools = [harmonia.ToolDescription("lookup", "Looks up.", {"type": "object"})]
    box.declare(ToolNamespaceConfig("crm", "The caller's CRM.", tools))
    message = Message.from_role_and_content(Role.ASSISTANT, "{}").with_recipient("crm.lookup")
    assert asyncio.run(box.dispatch(message)) is None
    assert not box.owns(box.parse_call(message))


def test_declarations_are_split_between_system_and_developer(box: Toolbox) -> None:
    box.declare(ToolNamespaceConfig("crm", None, []))
    assert [c.name for c in box.system_tools()] == ["browser", "python"]
    assert [c.name for c in box.developer_tools()] == ["functions", "crm"]
    with pytest.raises(InputError, match="already registered"):
        box.declare(ToolNamespaceConfig("python", None, []))


def test_not_a_tool_call_is_the_callers_error(box: Toolbox) -> None:
    # "json" is what `<|channel|>final json` parses to: structured output, not a call
    for recipient in (None, "all", "assistant", "user", "json", "<|constrain|>json"):
        message = Message.from_role_and_content(Role.ASSISTANT, "hi")
        message.recipient = recipient
        assert not is_tool_call(message)
        with pytest.raises(InputError, match="not a tool call"):
            box.parse_call(message)


def test_aclose_closes_every_runtime_and_reports_failures(
    fake_browser: Any, fake_python: Any, misbehaving: Any
) -> None:
    box = Toolbox([fake_browser, misbehaving, fake_python])
    with pytest.raises(harmonia.ToolError, match="close failed"):
        asyncio.run(box.aclose())
    assert fake_browser.closed and fake_python.closed


def test_runtimes_follow_the_protocol(fake_browser: Any) -> None:
    from harmonia.tools import FunctionTools, Tool
    from harmonia.tools.mcp import McpToolset

    assert isinstance(fake_browser, Tool)
    assert isinstance(FunctionTools(), Tool)
    assert isinstance(McpToolset.http("http://127.0.0.1:9/mcp", namespace="x"), Tool)


def test_tool_reply_without_channel_still_parses(enc: harmonia.HarmonyEncoding) -> None:
    reply = tool_reply(ToolCall("functions.f", "functions", "f", "{}"), "ok")
    assert enc.parse_messages_from_completion_tokens(enc.render(reply), role=None) == [reply]


def test_dispatch_sync_refuses_a_running_loop(box: Toolbox) -> None:
    message = Message.from_role_and_content(Role.ASSISTANT, "1").with_recipient("python")

    async def inside() -> None:
        with pytest.raises(InputError, match="await dispatch"):
            box.dispatch_sync(message)

    asyncio.run(inside())


def test_bare_function_tools_share_one_functions_namespace_and_non_tools_are_refused() -> None:
    from harmonia import InputTypeError
    from harmonia.tools import function_tool

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @function_tool
    def neg(a: int) -> int:
        """Negate an integer."""
        return -a

    box = Toolbox([add, neg])
    [functions] = box.developer_tools()
    assert functions.name == "functions" and [t.name for t in functions.tools] == ["add", "neg"]
    call = Message.from_role_and_content(Role.ASSISTANT, '{"a": 2, "b": 3}')
    reply = box.dispatch_sync(call.with_recipient("functions.add").with_channel("commentary"))
    assert reply is not None and reply.text == "5"
    with pytest.raises(InputTypeError, match="not function: wrap functions with @function_tool"):
        Toolbox([lambda: None])  # type: ignore[list-item]
