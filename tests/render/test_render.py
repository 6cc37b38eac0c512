"""Rendering rules of the reference (what openai-harmony 0.0.8 renders) and our extensions."""

from __future__ import annotations

import pytest

from harmonia import (
    Author,
    ChannelConfig,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyError,
    Message,
    ReasoningEffort,
    RenderConversationConfig,
    RenderError,
    RenderOptions,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
)
from harmonia._tokenizer.special_tokens import FIRST_SPECIAL, SPECIAL_TOKENS


def msg(role: Role, text: str = "x") -> Message:
    return Message.from_role_and_content(role, text)


def assistant(text: str, channel: str | None = None) -> Message:
    m = msg(Role.ASSISTANT, text)
    return m.with_channel(channel) if channel else m


DEFAULT_SYSTEM = [
    200006, 17360, 200008, 3575, 553, 17554, 162016, 11, 261, 4410, 6439, 2359,
    22203, 656, 7788, 17527, 558, 87447, 100594, 25, 220, 1323, 19, 12,
    3218, 279, 30377, 289, 25, 14093, 279, 2, 13888, 18403, 25, 8450,
    11, 49159, 11, 1721, 13, 21030, 2804, 413, 7360, 395, 1753, 3176,
    13, 200007,
]  # fmt: skip


def test_default_system_message(enc: HarmonyEncoding) -> None:
    assert (
        enc.render(Message.from_role_and_content(Role.SYSTEM, SystemContent.new()))
        == DEFAULT_SYSTEM
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (msg(Role.USER, "Hi"), [200006, 1428, 200008, 12194, 200007]),
        (
            Message.from_author_and_content(Author.new(Role.USER, "Bob"), "Hi"),
            [200006, 1428, 25, 53849, 200008, 12194, 200007],
        ),
        (
            assistant('{"location":"Tokyo"}', "commentary")
            .with_recipient("functions.get_weather")
            .with_content_type("<|constrain|>json"),
            [200006, 173781, 316, 28, 44580, 775, 170154, 200005, 12606, 815, 220, 200003, 4108,
             200008, 10848, 7693, 7534, 173844, 18583, 200012],
        ),
        (
            Message.from_author_and_content(
                Author.new(Role.TOOL, "functions.get_weather"), '{"temp":20}'
            )
            .with_recipient("assistant")
            .with_channel("commentary"),
            [200006, 44580, 775, 170154, 316, 28, 173781, 200005, 12606, 815, 200008, 10848, 7340,
             1243, 455, 92, 200007],
        ),
    ],
)  # fmt: skip
def test_worked_examples(enc: HarmonyEncoding, message: Message, expected: list[int]) -> None:
    assert enc.render(message) == expected


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (lambda m: m.with_recipient("all"), "<|start|>assistant<|message|>x<|call|>"),
        (
            lambda m: m.with_recipient("user").with_channel("final").with_content_type("text"),
            "<|start|>assistant to=user<|channel|>final text<|message|>x<|call|>",
        ),
    ],
)
def test_header_edge_cases(enc: HarmonyEncoding, build: object, text: str) -> None:
    m = build(assistant("x"))  # type: ignore[operator]
    assert enc.decode_utf8(enc.render(m)) == text


@pytest.mark.parametrize(
    ("build", "path"),
    [
        # The reference renders these, but no parser reads them back as written
        # (`to=<|message|>`, `assistant json` read as recipient json, ...).
        (lambda m: m.with_recipient(""), "recipient"),
        (lambda m: m.with_content_type(""), "content_type"),
        (lambda m: m.with_content_type("json"), "content_type"),
        (lambda m: m.with_content_type("<|constrain|>"), "content_type"),
        (lambda m: m.with_channel("a b"), "channel"),
        (lambda m: m.with_channel("X  "), "channel"),
    ],
)
def test_header_fields_that_cannot_be_read_back_are_refused(
    enc: HarmonyEncoding, build: object, path: str
) -> None:
    with pytest.raises(RenderError) as info:
        enc.render(build(assistant("x")))  # type: ignore[operator]
    assert info.value.path == path


def test_header_pieces_are_encoded_separately(enc: HarmonyEncoding) -> None:
    two_parts = Message.from_role_and_contents(Role.USER, ["hel", "lo"])
    assert enc.render(two_parts)[3:5] == [4161, 746]


def test_constrain_prefix_is_the_only_special_token_from_text(enc: HarmonyEncoding) -> None:
    m = assistant("x").with_content_type("<|constrain|> json")
    assert enc.render(m)[2:6] == [220, 200003, 5701, 200008]
    m = assistant("x").with_recipient("f").with_content_type("a<|constrain|>json")
    with pytest.raises(RenderError, match="cannot be written in a message header"):
        enc.render(m)  # never a special token from text: refused, not rendered


@pytest.mark.parametrize("token", sorted(SPECIAL_TOKENS))
def test_special_token_text_in_user_content_is_plain_text(enc: HarmonyEncoding, token: str) -> None:
    """Prompt-injection guard: no text a user writes becomes a special token."""
    for text in (token, f"a{token}b", f"{token}{token}"):
        tokens = enc.render(msg(Role.USER, text))
        assert enc.decode_utf8(tokens) == f"<|start|>user<|message|>{text}<|end|>"
        # the only special ids are the renderer's own framing tokens
        assert len([t for t in tokens if t >= FIRST_SPECIAL]) == 3
        # In a header, such text would read back as the token: refused, never rendered.
        for m in (
            Message.from_author_and_content(Author.new(Role.USER, text), text),
            assistant("x", text),
            assistant("x").with_recipient(text),
        ):
            with pytest.raises(RenderError, match="cannot be written in a message header"):
                enc.render(m)


def test_end_tokens(enc: HarmonyEncoding) -> None:
    assert enc.render(assistant("x").with_recipient("functions.f"))[-1] == 200012
    assert enc.render(assistant("x"))[-1] == 200007
    tool = Message.from_author_and_content(
        Author.new(Role.TOOL, "functions.f"), "x"
    ).with_recipient("assistant")
    assert enc.render(tool)[-1] == 200007
    assert enc.render(msg(Role.USER).with_recipient("bob"))[-1] == 200007


def test_system_text_sections(enc: HarmonyEncoding) -> None:
    def text(s: SystemContent) -> str:
        return enc.decode_utf8(enc.render(Message.from_role_and_content(Role.SYSTEM, s)))[26:-7]

    bare = SystemContent(None, None, None, None, None, None)
    assert text(bare) == ""
    assert (
        text(SystemContent(None, None, "2025-01-01", None, None, None))
        == "Current date: 2025-01-01"
    )
    assert (
        text(SystemContent(None, ReasoningEffort.LOW, None, None, None, None)) == "Reasoning: low"
    )
    assert (
        text(
            SystemContent(None, None, None, None, ChannelConfig(["analysis", "final"], False), None)
        )
        == "# Valid channels: analysis, final."
    )
    assert text(SystemContent(None, None, None, None, ChannelConfig([], True), None)) == ""
    assert (
        text(SystemContent("", None, None, "2024-06", None, None)) == "\nKnowledge cutoff: 2024-06"
    )


def test_functions_line_needs_a_developer_functions_namespace(enc: HarmonyEncoding) -> None:
    line = "Calls to these tools must go to the commentary channel: 'functions'."
    sys_msg = Message.from_role_and_content(Role.SYSTEM, SystemContent.new())

    def rendered(dev: DeveloperContent) -> str:
        conv = Conversation.from_messages(
            [sys_msg, Message.from_role_and_content(Role.DEVELOPER, dev)]
        )
        return enc.decode_utf8(enc.render_conversation(conv))

    tool = ToolDescription.new("f", "d")
    assert line in rendered(DeveloperContent.new().with_function_tools([tool]))
    assert line not in rendered(DeveloperContent.new().with_function_tools([]))
    assert line not in rendered(
        DeveloperContent.new().with_tools(ToolNamespaceConfig("other", None, [tool]))
    )
    # a functions namespace in the system message does not count
    sys_only = SystemContent.new().with_tools(ToolNamespaceConfig("functions", None, [tool]))
    conv = Conversation.from_messages([Message.from_role_and_content(Role.SYSTEM, sys_only)])
    assert line not in enc.decode_utf8(enc.render_conversation(conv))
    # and render() alone only knows what RenderOptions says
    assert line in enc.decode_utf8(
        enc.render(sys_msg, RenderOptions(conversation_has_function_tools=True))
    )


def test_namespaces_sorted_by_key_and_descriptions(enc: HarmonyEncoding) -> None:
    dev = DeveloperContent(
        "I",
        {
            "zeta": ToolNamespaceConfig("zeta", "Z", []),
            "functions": ToolNamespaceConfig("functions", None, [ToolDescription("f", "d")]),
        },
    )
    text = enc.decode_utf8(enc.render(Message.from_role_and_content(Role.DEVELOPER, dev)))
    assert text == (
        "<|start|>developer<|message|># Instructions\n\nI\n\n# Tools\n\n## functions\n\n"
        "namespace functions {\n\n// d\ntype f = () => any;\n\n} // namespace functions\n\n"
        "## zeta\n\nZ<|end|>"
    )


def three_turns() -> Conversation:
    return Conversation.from_messages(
        [
            msg(Role.USER, "q1"),
            assistant("a1", "analysis"),
            assistant("f1", "final"),
            msg(Role.USER, "q2"),
            assistant("a2", "analysis"),
            assistant("f2", "final"),
            msg(Role.USER, "q3"),
            assistant("a3", "analysis"),
            assistant("{}", "commentary").with_recipient("functions.f"),
            Message.from_author_and_content(Author.new(Role.TOOL, "functions.f"), "r")
            .with_recipient("assistant")
            .with_channel("commentary"),
        ]
    )


def contents(enc: HarmonyEncoding, tokens: list[int]) -> list[str]:
    text = enc.decode_utf8(tokens)
    return [
        part.split("<|message|>")[1].split("<|")[0]
        for part in text.split("<|start|>")[1:]
        if "<|message|>" in part
    ]


def test_cot_policies_on_three_turns(enc: HarmonyEncoding) -> None:
    conv = three_turns()
    everything = ["q1", "a1", "f1", "q2", "a2", "f2", "q3", "a3", "{}", "r"]
    # reference: the last assistant message is a tool call, not final -> keep all
    assert contents(enc, enc.render_conversation(conv)) == everything
    keep = RenderConversationConfig(cot_policy="keep_all")
    assert contents(enc, enc.render_conversation(conv, keep)) == everything
    # guide: finished turns lose their analysis; the unfinished tool turn keeps it
    guide = RenderConversationConfig(cot_policy="guide")
    assert contents(enc, enc.render_conversation(conv, guide)) == [
        "q1", "f1", "q2", "f2", "q3", "a3", "{}", "r",
    ]  # fmt: skip

    finished = Conversation.from_messages([*conv.messages, assistant("f3", "final")])
    # reference: only the analysis before the FIRST final is dropped
    assert contents(enc, enc.render_conversation(finished)) == [
        "q1", "f1", "q2", "a2", "f2", "q3", "a3", "{}", "r", "f3",
    ]  # fmt: skip
    assert contents(enc, enc.render_conversation(finished, guide)) == [
        "q1", "f1", "q2", "f2", "q3", "{}", "r", "f3",
    ]  # fmt: skip
    assert contents(enc, enc.render_conversation(finished, keep)) == [*everything, "f3"]
    no_drop = RenderConversationConfig(auto_drop_analysis=False)
    assert enc.render_conversation(finished, no_drop) == enc.render_conversation(finished, keep)


def test_unknown_cot_policy(enc: HarmonyEncoding) -> None:
    with pytest.raises(HarmonyError, match="unknown cot_policy 'all'"):
        enc.render_conversation(three_turns(), RenderConversationConfig(cot_policy="all"))


def test_completion_and_training_endings(enc: HarmonyEncoding) -> None:
    conv = Conversation.from_messages(
        [msg(Role.USER, "q"), assistant("a", "analysis"), assistant("f", "final")]
    )
    assert enc.decode_utf8(enc.render_conversation_for_training(conv)) == (
        "<|start|>user<|message|>q<|end|><|start|>assistant<|channel|>final<|message|>f<|return|>"
    )
    assert enc.render_conversation_for_completion(Conversation(), Role.ASSISTANT) == [
        200006,
        173781,
    ]
    assert enc.render_conversation_for_completion(Conversation(), Role.TOOL) == [200006, 17952]
    assert enc.render_conversation_for_training(Conversation()) == []
    tool_call_last = Conversation.from_messages([assistant("{}", "final").with_recipient("f")])
    assert enc.render_conversation_for_training(tool_call_last)[-1] == 200002


def test_render_equals_render_conversation_of_one(enc: HarmonyEncoding) -> None:
    for m in three_turns().messages:
        assert enc.render(m) == enc.render_conversation(Conversation.from_messages([m]))


def test_render_errors_say_where(enc: HarmonyEncoding) -> None:
    nameless = Message.from_author_and_content(Author.new(Role.TOOL), "x")
    conv = Conversation.from_messages([msg(Role.USER), nameless])
    with pytest.raises(RenderError) as info:
        enc.render_conversation(conv)
    assert info.value.reason == "Tools should have a name!"
    assert info.value.message_index == 1 and info.value.path == "author.name"
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)

    wrong = Message.from_role_and_content(Role.USER, SystemContent.new())
    with pytest.raises(
        RenderError, match="SystemContent may only appear in system messages, found in User"
    ):
        enc.render(wrong)
    wrong = Message.from_role_and_content(Role.ASSISTANT, DeveloperContent.new())
    with pytest.raises(RenderError, match="found in Assistant"):
        enc.render(wrong)


def test_lone_surrogates_are_refused_not_altered(enc: HarmonyEncoding) -> None:
    conv = Conversation.from_messages(
        [msg(Role.USER, "ok"), Message.from_role_and_contents(Role.USER, ["a", "b\ud800"])]
    )
    with pytest.raises(RenderError) as info:
        enc.render_conversation(conv)
    assert info.value.message_index == 1 and info.value.path == "content[1].text"


def test_non_json_schema_is_refused(enc: HarmonyEncoding) -> None:
    dev = DeveloperContent.new().with_function_tools(
        [
            ToolDescription.new(
                "f", "d", {"type": "object", "properties": {"a": {"default": float("nan")}}}
            )
        ]
    )
    with pytest.raises(RenderError):
        enc.render(Message.from_role_and_content(Role.DEVELOPER, dev))


def test_content_cache_never_goes_stale(enc: HarmonyEncoding) -> None:
    s = SystemContent.new()
    m = Message.from_role_and_content(Role.SYSTEM, s)
    first = enc.render(m)
    s.with_reasoning_effort(ReasoningEffort.HIGH)
    second = enc.render(m)
    assert first != second
    assert second == enc.render(
        Message.from_role_and_content(
            Role.SYSTEM, SystemContent.new().with_reasoning_effort(ReasoningEffort.HIGH)
        )
    )
    d = DeveloperContent.new().with_function_tools(
        [ToolDescription.new("f", "d", {"type": "object"})]
    )
    dm = Message.from_role_and_content(Role.DEVELOPER, d)
    before = enc.render(dm)
    assert d.tools is not None
    d.tools["functions"].tools[0].parameters = {"type": "string"}
    assert enc.render(dm) != before


def test_rendering_does_not_modify_inputs(enc: HarmonyEncoding) -> None:
    conv = three_turns()
    snapshot = conv.to_json()
    enc.render_conversation_for_completion(conv, Role.ASSISTANT)
    enc.render_conversation_for_training(conv, RenderConversationConfig(cot_policy="guide"))
    assert conv.to_json() == snapshot


def test_system_and_developer_may_carry_text(enc: HarmonyEncoding) -> None:
    m = Message.from_role_and_contents(
        Role.SYSTEM, [SystemContent(None, None, None, None, None, None), TextContent("EXTRA")]
    )
    assert enc.decode_utf8(enc.render(m)) == "<|start|>system<|message|>EXTRA<|end|>"


def test_corrected_typescript_is_opt_in(enc: HarmonyEncoding) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["n"],
    }
    dev = DeveloperContent.new().with_function_tools([ToolDescription.new("f", "d", schema)])
    conv = Conversation.from_messages([Message.from_role_and_content(Role.DEVELOPER, dev)])
    exact = enc.decode_utf8(enc.render_conversation(conv))
    fixed = enc.decode_utf8(
        enc.render_conversation(conv, RenderConversationConfig(typescript="corrected"))
    )
    assert "n: any," in exact
    assert "n: number | null," in fixed
    one = Message.from_role_and_content(Role.DEVELOPER, dev)
    assert enc.decode_utf8(enc.render(one, RenderOptions(typescript="corrected"))) in fixed
    with pytest.raises(RenderError, match="unknown typescript mode"):
        enc.render(one, RenderOptions(typescript="pretty"))


def test_message_text_cache_is_safe_to_reuse(enc: HarmonyEncoding) -> None:
    from harmonia._render import renderer as _render

    conv = Conversation.from_messages([msg(Role.USER, "Grüße, world"), msg(Role.USER, "Hi")])
    first = enc.render_conversation(conv)
    first.append(-1)  # a caller changing its result must not change the next render
    again = enc.render_conversation(conv)
    assert again == first[:-1]
    assert again == enc.render_conversation(conv)
    # A text too long to cache, and non-text content, still render and fail as before.
    long_text = "word " * (_render._CACHED_TEXT_CHARS // 4)
    assert enc.render(msg(Role.USER, long_text)) == enc.render(msg(Role.USER, long_text))
    bad = Message.from_role_and_contents(Role.USER, ["a"])
    bad.content[0].text = ["not", "a", "string"]  # type: ignore[attr-defined]
    with pytest.raises(RenderError, match="expected a string, got list"):
        enc.render(bad)


def test_message_text_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from harmonia._render import renderer as _render
    from harmonia._tokenizer import get_tokenizer

    renderer = _render.Renderer(get_tokenizer())
    monkeypatch.setattr(_render, "_TEXT_CACHE_CHARS", 100)
    for i in range(50):
        renderer.render_message(msg(Role.USER, f"message number {i}"), False)
    assert 0 < renderer._texts_size <= 100 + len("message number 49")
    assert sum(map(len, renderer._texts)) == renderer._texts_size
