"""The ``harmonia`` command line, driven through ``main(argv)``."""

from __future__ import annotations

import io
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

import harmonia
from harmonia._cli.main import main


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    status = main(argv, stdout=out)
    return status, out.getvalue()


@pytest.fixture
def conversation_file(tmp_path: Path) -> Path:
    conv = harmonia.Conversation.from_messages(
        [
            harmonia.Message.from_role_and_content(
                harmonia.Role.SYSTEM, harmonia.SystemContent.new()
            ),
            harmonia.Message.from_role_and_content(harmonia.Role.USER, "What is 2 + 2?"),
        ]
    )
    path = tmp_path / "conv.json"
    path.write_text(conv.to_json())
    return path


def test_render_formats(enc: harmonia.HarmonyEncoding, conversation_file: Path) -> None:
    conv = harmonia.Conversation.from_json(conversation_file.read_text())
    expected = enc.render_conversation_for_completion(conv, harmonia.Role.ASSISTANT)
    status, out = run(["render", str(conversation_file), "--format", "ids"])
    assert status == 0 and json.loads(out) == expected
    status, out = run(["render", str(conversation_file), "--format", "text"])
    assert status == 0 and out == enc.decode_utf8(expected) + "\n"
    status, out = run(["render", str(conversation_file)])
    payload = json.loads(out)
    assert payload["tokens"] == expected and payload["num_tokens"] == len(expected)
    status, out = run(
        ["render", str(conversation_file), "--mode", "conversation", "--format", "ids"]
    )
    assert json.loads(out) == enc.render_conversation(conv)


def test_render_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run(["render", str(bad)])[0] == 1
    assert "is not JSON" in capsys.readouterr().err
    assert run(["render", str(tmp_path / "missing.json")])[0] == 1
    assert run(["render"])[0] == 2  # usage error


def test_schema_of_tools_and_bare_schemas(tmp_path: Path) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Gets weather.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(tools))
    status, out = run(["schema", str(path)])
    assert status == 0
    assert out == (
        "## functions\n\nnamespace functions {\n\n// Gets weather.\n"
        "type get_weather = (_: {\ncity: string,\n}) => any;\n\n} // namespace functions\n"
    )
    path.write_text(json.dumps({"anyOf": [{"type": "string"}, {"type": "null"}]}))
    assert run(["schema", str(path)]) == (0, "any\n")
    assert run(["schema", str(path), "--typescript", "corrected"]) == (0, "string | null\n")


COMPLETION = (
    "<|channel|>analysis<|message|>Think.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Four.<|return|>"
)


def test_parse_text_and_ids(enc: harmonia.HarmonyEncoding, tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text(COMPLETION)
    status, out = run(["parse", str(path), "--role", "assistant"])
    payload = json.loads(out)
    assert status == 0 and payload["diagnostics"] == []
    assert [(m["channel"], m["content"][0]["text"]) for m in payload["messages"]] == [
        ("analysis", "Think."),
        ("final", "Four."),
    ]
    ids = tmp_path / "c.ids"
    ids.write_text(" ".join(map(str, enc.encode(COMPLETION, allowed_special="all"))))
    assert run(["parse", str(ids), "--role", "assistant"]) == (0, out)


def test_parse_strict_error_and_lenient_diagnostics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.txt"
    path.write_text(COMPLETION + "trailing junk")
    assert run(["parse", str(path), "--role", "assistant"])[0] == 1
    assert "Unexpected token" in capsys.readouterr().err
    status, out = run(["parse", str(path), "--role", "assistant", "--lenient"])
    payload = json.loads(out)
    assert status == 0 and len(payload["messages"]) == 2
    [diag] = payload["diagnostics"]
    assert diag["kind"] == "junk-between-messages" and diag["dropped"] == "trailing junk"


def test_inspect_terminal(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text(COMPLETION)
    status, out = run(["inspect", str(path), "--role", "assistant", "--color", "never"])
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "[0] assistant · channel analysis · 6 tokens from #0"
    assert "⟦<|channel|>⟧analysis⟦<|message|>⟧Think.⟦<|end|>⟧" in lines[1]
    assert lines[-1] == "14 tokens, 2 messages, 0 diagnostics"  # known at the end
    status, coloured = run(["inspect", str(path), "--role", "assistant", "--color", "always"])
    assert "\x1b[" in coloured


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[dict[str, str | None]] = []
        self.headers: list[dict[str, str | None]] = []
        self.token_titles: list[str] = []
        self.diags = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a)
        if tag == "header":
            self.headers.append(a)
        if tag == "span" and (a.get("title") or "").startswith("#"):
            self.token_titles.append(a.get("title") or "")
        if tag == "div" and a.get("class") == "diag":
            self.diags += 1
        assert tag not in ("script", "link", "img"), "the page must be self-contained"


def test_inspect_html_page(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text(
        "junk"
        + COMPLETION.replace("<|channel|>analysis", "<|start|>assistant<|channel|>analysis", 1)
    )
    page = tmp_path / "out.html"
    status, out = run(["inspect", str(path), "--html", str(page)])
    assert status == 0 and out == f"wrote {page}\n"
    collector = _Collector()
    collector.feed(page.read_text(encoding="utf-8"))
    assert [s["class"] for s in collector.sections] == ["block", "block"]
    # a block's role and channel are known at its end, so they sit on its header
    assert [h["class"] for h in collector.headers] == [
        "role-assistant channel-analysis",
        "role-assistant channel-final",
    ]
    assert collector.token_titles[0] == "#0 id " + str(
        harmonia.load_harmony_encoding("HarmonyGptOss").encode("junk")[0]
    )
    text = path.read_text()
    assert len(collector.token_titles) == len(
        harmonia.load_harmony_encoding("HarmonyGptOss").encode(text, allowed_special="all")
    )
    assert collector.diags == 1


def test_render_accepts_a_chat_completions_request(
    enc: harmonia.HarmonyEncoding, tmp_path: Path
) -> None:
    request = {
        "model": "gpt-oss-20b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    status, out = run(["render", str(path), "--format", "text"])
    assert status == 0
    assert out.endswith(
        "<|start|>developer<|message|># Instructions\n\nBe brief.<|end|>"
        "<|start|>user<|message|>Hi<|end|><|start|>assistant\n"
    )
    path.write_text(
        json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
    )
    assert run(["render", str(path)])[0] == 1
