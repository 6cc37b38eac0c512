"""The mask API: what the matcher allows, token by token, and how it moves."""

from __future__ import annotations

import numpy as np
import pytest

import harmonia as h
from harmonia import DeveloperContent, InputError, Message, Role, SystemContent, ToolDescription
from harmonia._tokenizer import special_tokens as st

pytest.importorskip("llguidance")

from grammar_helpers import WEATHER, conversation, needs_llguidance_1_9

from harmonia.constrained import (
    MASK_WORDS,
    VOCAB_SIZE,
    GrammarOptions,
    TokenRejectedError,
    TurnMatcher,
    apply_mask,
    build_turn_grammar,
    mask_to_bool,
)

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
FUNCTIONS = conversation(SystemContent.new(), DeveloperContent.new().with_function_tools([WEATHER]))


def ids(text: str) -> list[int]:
    """Text with special tokens spelled out, as token ids."""
    return ENC.encode(text, allowed_special="all")


def matcher(conv: h.Conversation = FUNCTIONS, **options: object) -> TurnMatcher:
    return TurnMatcher.from_conversation(conv, GrammarOptions(**options))  # type: ignore[arg-type]


def test_first_token_of_a_plain_turn_is_the_channel_marker() -> None:
    m = matcher(conversation(SystemContent.new()))
    assert m.allowed_tokens().tolist() == [st.CHANNEL]


def test_first_tokens_with_tools_include_the_role_form_recipient() -> None:
    allowed = set(matcher().allowed_tokens().tolist())
    assert st.CHANNEL in allowed
    assert ENC.encode_ordinary(" to=functions.get_weather")[0] in allowed
    assert st.START not in allowed and st.END not in allowed


def test_special_tokens_are_matched_by_id_not_by_spelling() -> None:
    m = matcher()
    m.consume_all(ids("<|channel|>analysis<|message|>"))
    spelled = ENC.encode_ordinary("I could write <|end|> or <|return|> here")
    m.consume_all(spelled)  # the spelling is ordinary text: content
    assert not m.is_finished and not m.can_end()
    assert m.allows(st.END) and not m.allows(st.RETURN) and not m.allows(st.CALL)
    for special in (st.START, st.CHANNEL, st.MESSAGE, st.CONSTRAIN, st.ENDOFTEXT, 200018):
        assert not m.allows(special)
    m.consume(st.END)
    assert m.allowed_tokens().tolist() == [st.START]


def test_final_answer_ends_with_return_only() -> None:
    m = matcher()
    m.consume_all(ids("<|channel|>final<|message|>Sunny.<|return|>"[: -len("<|return|>")]))
    assert m.can_end()
    assert not m.allows(st.END) and not m.allows(st.CALL)
    m.consume(st.RETURN)
    assert m.is_finished and not m.can_end()
    assert m.stop_token == st.RETURN


@pytest.mark.parametrize(
    "turn",
    [
        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
        '{"city": "Tokyo"}<|call|>',
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Tokyo"}<|call|>',
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
        "commentary<|message|>Checking.<|end|><|start|>assistant to=functions.get_weather"
        '<|channel|>commentary <|constrain|>json<|message|>{\n  "city": "K\\u00f6ln"\n}<|call|>',
    ],
)
@needs_llguidance_1_9
def test_tool_calls_are_accepted_in_both_header_forms(turn: str) -> None:
    m = matcher()
    m.consume_all(ids(turn))
    assert m.is_finished and m.stop_token == st.CALL
    [*_, call] = ENC.parse_messages_from_completion_tokens(m.tokens, Role.ASSISTANT)
    assert (call.recipient, call.channel, call.content_type) == (
        "functions.get_weather",
        "commentary",
        "<|constrain|>json",
    )


@pytest.mark.parametrize(
    ("turn", "bad"),
    [
        ("<|channel|>commentary to=functions.nope", "nope"),
        (" to=functions.nope", "nope"),
        ("<|channel|>analysis to=functions.get_weather", " to"),  # functions: commentary only
        ("<|channel|>commentary to=functions.get_weather<|message|>", "<|message|>"),
        (
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": 5',
            "5",
        ),
        ("<|channel|>analysis<|message|>x<|return|>", "<|return|>"),
        ("<|channel|>final<|message|>x<|call|>", "<|call|>"),
        ("<|channel|>final<|message|>x<|end|>", "<|end|>"),
        ("<|channel|>analysis<|message|>x<|end|><|channel|>", "<|channel|>"),
        ("<|channel|>thinking", "thinking"),
        ("assistant<|channel|>final", "assistant"),
    ],
)
def test_what_the_grammar_refuses(turn: str, bad: str) -> None:
    tokens = ids(turn)
    # The refused token is the one holding the first character of the last `bad`.
    offset = turn.rindex(bad)
    ends = np.cumsum([len(ENC.decode([t])) for t in tokens])
    position = int(np.searchsorted(ends, offset, side="right"))
    m = matcher()
    m.consume_all(tokens[:position])
    before = m.tokens
    with pytest.raises(TokenRejectedError) as info:
        m.consume(tokens[position])
    assert info.value.token == tokens[position] and info.value.position == position
    assert isinstance(info.value, h.ModelOutputError)
    assert m.tokens == before  # unchanged, still usable
    assert m.allows(st.CHANNEL) or m.allowed_tokens().size > 0


def test_llguidance_tokenizer_lists_each_id_once() -> None:
    from harmonia.constrained._mask import llg_tokenizer

    tokenizer = llg_tokenizer()
    assert tokenizer.vocab_size == VOCAB_SIZE
    assert all(tokenizer.is_special_token(t) for t in (st.FIRST_SPECIAL, 200018, st.LAST_SPECIAL))
    assert not tokenizer.is_special_token(ENC.encode_ordinary("<|end|>")[0])


def test_numpy_integers_are_tokens() -> None:
    m = matcher()
    token = np.int64(st.CHANNEL)
    assert m.allows(token)  # type: ignore[arg-type]
    m.consume(token)  # type: ignore[arg-type]
    assert m.tokens == (st.CHANNEL,) and type(m.tokens[0]) is int


def test_rejections_outside_the_vocabulary_and_after_the_end() -> None:
    m = matcher()
    for token in (-1, VOCAB_SIZE, 2**40):
        assert not m.allows(token)
        with pytest.raises(TokenRejectedError, match="not a token id"):
            m.consume(token)
    m.consume_all(ids("<|channel|>final<|message|>ok<|return|>"))
    with pytest.raises(TokenRejectedError, match="already finished"):
        m.consume(st.START)


def test_mask_layout_and_apply() -> None:
    m = matcher()
    mask = m.fill_mask()
    assert mask.dtype == np.int32 and mask.shape == (MASK_WORDS,)
    allowed = mask_to_bool(mask)
    assert allowed.shape == (VOCAB_SIZE,)
    assert np.flatnonzero(allowed).tolist() == m.allowed_tokens().tolist()
    for token in m.allowed_tokens()[:50]:
        assert m.allows(int(token))
    logits = np.zeros((2, 201_088), dtype=np.float32)  # gpt-oss's logits: one id fewer
    apply_mask(logits, mask)
    assert np.isfinite(logits[0]).sum() == allowed[:201_088].sum()
    padded = np.zeros(VOCAB_SIZE + 100, dtype=np.float32)
    apply_mask(padded, mask)
    assert np.isneginf(padded[VOCAB_SIZE:]).all()


def test_fill_mask_into_a_batch_row_and_after_the_end() -> None:
    m = matcher()
    batch = np.full((3, MASK_WORDS), -1, dtype=np.int32)
    m.fill_mask(batch[1])
    assert (batch[0] == -1).all() and (batch[2] == -1).all()
    assert mask_to_bool(batch[1]).sum() == m.allowed_tokens().size
    with pytest.raises(InputError):
        m.fill_mask(np.zeros(MASK_WORDS, dtype=np.int64))  # type: ignore[arg-type]
    with pytest.raises(InputError):
        m.fill_mask(np.zeros(10, dtype=np.int32))
    m.consume_all(ids("<|channel|>final<|message|><|return|>"))
    assert not m.fill_mask().any()  # finished: nothing is allowed


def test_rollback_reset_copy_and_sync() -> None:
    m = matcher()
    turn = ids(
        "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>"
    )
    m.consume_all(turn)
    twin = m.copy()
    m.rollback(4)
    assert m.tokens == tuple(turn[:-4])
    assert twin.tokens == tuple(turn)
    m.consume_all(turn[-4:])
    assert m.fill_mask().tolist() == twin.fill_mask().tolist()
    with pytest.raises(InputError):
        m.rollback(len(turn) + 1)
    m.reset()
    assert m.tokens == ()
    m.sync(turn)
    assert m.tokens == tuple(turn)
    m.sync([turn[0], *ids("final<|message|>")])  # diverged after 1 token
    assert m.tokens == (turn[0], *ids("final<|message|>"))
    m.sync([])
    assert m.tokens == ()
    m.sync(ids("<|channel|>final<|message|>x<|return|>junk after the end"))
    assert m.is_finished and m.tokens[-1] == st.RETURN


def test_analysis_length_bound() -> None:
    m = matcher(analysis_max_tokens=3)
    m.consume_all(ids("<|channel|>analysis<|message|>"))
    m.consume_all(ENC.encode_ordinary(" one two three"))
    assert m.allowed_tokens().tolist() == [st.END]
    m.consume(st.END)
    # Rolling back into the bounded text replays (llguidance cannot roll back there).
    m.rollback(2)
    assert not m.allows(st.END) or m.tokens[-1] != st.END
    m.consume_all(ENC.encode_ordinary(" three"))
    assert m.allowed_tokens().tolist() == [st.END]


def test_tool_choice_required_and_none() -> None:
    required = matcher(tool_choice="required")
    required.consume_all(ids("<|channel|>"))
    assert not required.allows(ENC.encode_ordinary("final")[0])
    none = matcher(tool_choice="none")
    assert none.allowed_tokens().tolist() == [st.CHANNEL]


def test_response_format_final_must_be_json_of_the_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    conv = conversation(developer=DeveloperContent.new().with_response_format("answer", schema))
    for answer in ('{"n": 3}', '{"n":-12}'):
        for header in (
            "<|channel|>final<|message|>",
            "<|channel|>final <|constrain|>json<|message|>",
        ):
            m = matcher(conv)
            m.consume_all(ids(header + answer + "<|return|>"))
            assert m.is_finished
    m = matcher(conv)
    m.consume_all(ids("<|channel|>final<|message|>"))
    assert not m.allows(ENC.encode_ordinary("Sure")[0])
    m.consume_all(ENC.encode_ordinary('{"n": 1'))
    assert not m.can_end()


def test_python_code_is_free_text_and_browser_arguments_are_json() -> None:
    conv = conversation(SystemContent.new().with_browser_tool().with_python_tool())
    m = matcher(conv)
    m.consume_all(ids("<|channel|>analysis to=python code<|message|>"))
    m.consume_all(ENC.encode_ordinary("print('<|call|>')"))
    assert not m.is_finished
    m.consume(st.CALL)
    assert m.is_finished
    m = matcher(conv)
    m.consume_all(ids(' to=browser.open<|channel|>commentary<|message|>{"id": "https://x.org", '))
    m.consume_all(ENC.encode_ordinary('"cursor": '))
    assert not m.allows(ENC.encode_ordinary('"')[0])  # cursor is a number
    m.consume_all([*ENC.encode_ordinary("2}"), st.CALL])
    assert m.is_finished


def test_unsupported_schema_is_an_input_error_naming_the_tool() -> None:
    bad = ToolDescription.new("bad", "", {"type": "object", "properties": {"x": {"not": {}}}})
    conv = conversation(developer=DeveloperContent.new().with_function_tools([WEATHER, bad]))
    with pytest.raises(InputError, match=r"tool functions.bad \(parameters\).*not"):
        TurnMatcher.from_conversation(conv)
    # lenient_schemas lets llguidance ignore what it does not implement
    TurnMatcher.from_conversation(conv, GrammarOptions(lenient_schemas=True))


def test_unsupported_response_format_is_named() -> None:
    dev = DeveloperContent.new().with_response_format(
        "answer", {"type": "string", "format": "nope"}
    )
    with pytest.raises(InputError, match="response format 'answer'"):
        TurnMatcher.from_conversation(conversation(developer=dev))


def test_a_grammar_of_your_own() -> None:
    m = TurnMatcher(f'start: <[{st.CHANNEL}]> "final" <[{st.MESSAGE}]> "42" <[{st.RETURN}]>')
    m.consume_all(ids("<|channel|>final<|message|>42<|return|>"))
    assert m.is_finished
    with pytest.raises(InputError, match="cannot compile"):
        TurnMatcher("start: undefined_rule")
    with pytest.raises(InputError):
        TurnMatcher(b"start: x")  # type: ignore[arg-type]


def test_exported_grammar_is_what_the_matcher_follows() -> None:
    grammar = build_turn_grammar(FUNCTIONS)
    assert matcher().grammar == grammar
    exported = TurnMatcher(grammar)
    exported.consume_all(
        ids("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}")
    )
    exported.consume(st.CALL)
    assert exported.is_finished


def test_renders_of_parsed_messages_are_accepted() -> None:
    calls = [
        Message.from_role_and_content(Role.ASSISTANT, "<|end|>").with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, '{"city":"Oslo"}')
        .with_channel("commentary")
        .with_recipient("functions.get_weather")
        .with_content_type("<|constrain|>json"),
    ]
    tokens: list[int] = []
    for message in calls:
        tokens += ENC.render(message)
    m = matcher()
    m.consume_all(tokens[2:])
    assert m.is_finished
