"""MCP client direction: a real MCP server (the SDK's own) becomes a harmony namespace."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

import harmonia
from harmonia import InputError, Message, Role, ToolError
from harmonia.tools import Toolbox
from harmonia.tools.mcp import McpToolset

pytest.importorskip("mcp", reason="the 'mcp' extra is not installed")


def _call(recipient: str, body: str) -> Message:
    message = Message.from_role_and_content(Role.ASSISTANT, body).with_recipient(recipient)
    return message.with_channel("commentary").with_content_type("<|constrain|>json")


async def _exercise(toolset: McpToolset, enc: harmonia.HarmonyEncoding) -> dict[str, Any]:
    async with toolset, Toolbox([toolset]) as box:
        config = toolset.namespace_config()
        replies = {
            name: await box.dispatch(_call(recipient, body))
            for name, recipient, body in [
                ("add", "demo.add", '{"a": 40}'),
                ("greet", "functions.demo.greet", '{"name": "Ada", "title": "Dr"}'),
                ("picture", "demo.picture", ""),
                ("explode", "demo.explode", '{"reason": "no fuel"}'),
                ("bad", "demo.add", '{"a": "x"}'),
                ("unknown", "demo.subtract", "{}"),
            ]
        }
        developer = harmonia.DeveloperContent.new().with_tools(config)
        rendered = enc.decode(enc.render(Message.from_role_and_content(Role.DEVELOPER, developer)))
    return {"config": config, "replies": replies, "rendered": rendered}


def _check(result: dict[str, Any], enc: harmonia.HarmonyEncoding) -> None:
    config = result["config"]
    assert config.name == "demo"
    assert config.description == "Demo tools for tests."
    assert [t.name for t in config.tools] == ["add", "greet", "picture", "explode"]
    greet = next(t for t in config.tools if t.name == "greet").parameters
    # harmonised: no titles, Optional as a type list, no null default
    assert greet["properties"]["title"] == {"type": ["string", "null"]}
    assert "title" not in greet
    assert (
        "type add = (_: {\na: number,\nb?: number, // default: 2\n}) => any;" in result["rendered"]
    )

    replies = result["replies"]
    assert replies["add"].text == "42"
    assert replies["add"].author.name == "demo.add"
    assert replies["greet"].text == "Hello, Dr Ada!"
    assert replies["greet"].author.name == "demo.greet"  # the functions. alias resolved
    assert replies["picture"].text == "a chart\n[image image/png, 8 bytes]"
    # the SDK reports a failing tool as an error result without the detail
    assert replies["explode"].text == "Error executing tool explode"
    assert replies["bad"].text.startswith("Error: invalid arguments for demo.add: at $.a:")
    assert replies["unknown"].text.startswith("Error: there is no tool 'demo.subtract'.")
    for reply in replies.values():
        assert reply.recipient == "assistant" and reply.channel == "commentary"
        tokens = enc.render(reply)
        assert enc.parse_messages_from_completion_tokens(tokens, role=None) == [reply]


def test_stdio_server_as_a_namespace(
    enc: harmonia.HarmonyEncoding, demo_server_script: str
) -> None:
    toolset = McpToolset.stdio([sys.executable, demo_server_script], connect_timeout=20)
    result = asyncio.run(asyncio.wait_for(_exercise(toolset, enc), 40))
    _check(result, enc)


def test_streamable_http_server_as_a_namespace(
    enc: harmonia.HarmonyEncoding, demo_server_script: str, serve_app: Any
) -> None:
    import runpy

    demo = runpy.run_path(demo_server_script)["mcp"]
    with serve_app(demo.streamable_http_app()) as server:
        toolset = McpToolset.http(f"{server.base}/mcp", connect_timeout=10)
        result = asyncio.run(asyncio.wait_for(_exercise(toolset, enc), 30))
    _check(result, enc)


def test_connection_failures_are_tool_errors(demo_server_script: str) -> None:
    async def main() -> None:
        missing = McpToolset.stdio(
            [sys.executable, "-c", "import sys; sys.exit(3)"], connect_timeout=10
        )
        with pytest.raises(ToolError, match="cannot connect to the MCP server"):
            await missing.connect()
        toolset = McpToolset.stdio([sys.executable, demo_server_script])
        with pytest.raises(InputError, match="is not connected"):
            toolset.namespace_config()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_repr_hides_headers() -> None:
    toolset = McpToolset.http("http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer s3cret"})
    assert "s3cret" not in repr(toolset)
    with pytest.raises(InputError, match="is a URL string"):
        McpToolset("http", ["a", "b"])
