"""A browser call parsed from model output, run, and its reply rendered in harmony."""

from __future__ import annotations

import asyncio
from typing import Any

from harmonia import (
    Author,
    HarmonyEncodingName,
    Message,
    Role,
    TextContent,
    load_harmony_encoding,
    parse_text,
)
from harmonia.tools import ToolCall
from harmonia.tools.browser import BrowserTool, Page, SearchResult


def test_round_trip_through_harmony(backend_cls: Any) -> None:
    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    completion = (
        '<|channel|>analysis to=browser.search code<|message|>{"query": "tides", "topn": 1}<|call|>'
    )
    [msg] = parse_text(encoding, completion, Role.ASSISTANT)
    assert msg.recipient == "browser.search"
    namespace, name = msg.recipient.split(".", 1)
    body = msg.content[0]
    assert isinstance(body, TextContent)
    call = ToolCall(msg.recipient, namespace, name, body.text, msg.channel, msg.content_type)

    pages = {"https://t.example/": Page("https://t.example/", "Tides", "high\nlow")}
    tool = BrowserTool(backend_cls(pages, [SearchResult("https://t.example/", "Tides", "Sea.")]))
    out = asyncio.run(tool.call(call))
    reply = Message(
        Author(Role.TOOL, "browser.search"),
        [TextContent(out.text)],
        channel=msg.channel,
        recipient="assistant",
    )
    rendered = encoding.decode_utf8(encoding.render(reply))
    assert rendered == (
        "<|start|>browser.search to=assistant<|channel|>analysis<|message|>"
        "[0] tides\n**viewing lines [0 - 4] of 4**\n\n"
        "L0: \nL1: URL: \nL2: # Search Results\nL3: \nL4:   * 【0†Tides†t.example】 Sea.<|end|>"
    )
