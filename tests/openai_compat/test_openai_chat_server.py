"""The server example of docs/openai-compat.md, run and queried with the real ``openai`` client."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")

DOC = Path(__file__).parent.parent.parent / "docs" / "openai-compat.md"


@pytest.fixture(scope="module")
def server() -> Iterator[dict[str, Any]]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, Any] = {"__name__": "openai_compat_doc_example"}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    httpd = namespace["ThreadingHTTPServer"](("127.0.0.1", 0), namespace["Handler"])
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    namespace["base_url"] = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield namespace
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def client(server: dict[str, Any]) -> Any:
    return openai.OpenAI(base_url=server["base_url"], api_key="-", max_retries=0, timeout=30)


def test_chat(server: dict[str, Any]) -> None:
    completion = client(server).chat.completions.create(
        model="gpt-oss-120b", messages=[{"role": "user", "content": "Hi"}]
    )
    message = completion.choices[0].message
    assert message.content == "Hello! How can I help?"
    assert message.model_extra == {"reasoning_content": "A greeting; answer briefly."}
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


def test_chat_stream(server: dict[str, Any]) -> None:
    stream = client(server).chat.completions.create(
        model="gpt-oss-120b",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    content, reasoning, finish = "", "", None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content", "")
            finish = choice.finish_reason or finish
    assert (content, reasoning, finish) == (
        "Hello! How can I help?",
        "A greeting; answer briefly.",
        "stop",
    )


def test_chat_length(server: dict[str, Any]) -> None:
    completion = client(server).chat.completions.create(
        model="gpt-oss-120b", messages=[{"role": "user", "content": "Hi"}], max_tokens=12
    )
    assert completion.choices[0].finish_reason == "length"


def test_chat_bad_request(server: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(
            model="gpt-oss-120b",
            messages=[{"role": "tool", "tool_call_id": "nope", "content": "x"}],
        )
    assert info.value.param == "messages[0].tool_call_id"


def test_responses(server: dict[str, Any]) -> None:
    response = client(server).responses.create(model="gpt-oss-120b", input="Hi")
    assert response.output_text == "Hello! How can I help?"
    assert [item.type for item in response.output] == ["reasoning", "message"]


def test_responses_stream(server: dict[str, Any]) -> None:
    events = list(client(server).responses.create(model="gpt-oss-120b", input="Hi", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello! How can I help?"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text
