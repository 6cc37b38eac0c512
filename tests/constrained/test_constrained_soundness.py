"""Soundness of the mask: engine failures stay in their turn, no foreign special token,
no whitespace before a JSON value."""

from __future__ import annotations

import numpy as np
import pytest
from grammar_helpers import needs_llguidance_1_9

import harmonia as h
from harmonia import Conversation, DeveloperContent, Message, Role, SystemContent

pytest.importorskip("llguidance")

from harmonia.constrained import (
    HARMONY_SPECIAL_TOKENS,
    GrammarEngineError,
    GrammarOptions,
    TokenRejectedError,
    TurnMatcher,
    build_turn_grammar,
    mask_to_bool,
)

ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
ENDOFTEXT = 199_999
FINAL_HEAD = "<|channel|>final<|message|>"


def ids(text: str) -> list[int]:
    return ENC.encode(text, allowed_special="all")


def two_formats() -> Conversation:
    dev = (
        DeveloperContent.new()
        .with_response_format("count", {"type": "integer"})
        .with_response_format("point", {"type": "object", "properties": {"x": {"type": "string"}}})
    )
    return Conversation.from_messages(
        [
            Message.from_role_and_content(Role.SYSTEM, SystemContent.new()),
            Message.from_role_and_content(Role.DEVELOPER, dev),
            Message.from_role_and_content(Role.USER, "Hi"),
        ]
    )


def foreign_specials(mask: np.ndarray) -> set[int]:
    allowed = np.flatnonzero(mask_to_bool(mask))
    return {int(t) for t in allowed if t >= 199_998} - HARMONY_SPECIAL_TOKENS


# -- leading whitespace: refused, as the docs say, whatever the number of formats ------------


@pytest.mark.parametrize("budget", [None, 50])
def test_two_formats_refuse_whitespace_before_the_value(budget: int | None) -> None:
    m = TurnMatcher.from_conversation(two_formats(), GrammarOptions(analysis_max_tokens=budget))
    m.consume_all(ids(FINAL_HEAD))
    for space in (" ", "\n", "\t"):
        assert not m.allows(ENC.encode_ordinary(space)[0])
    allowed = set(m.allowed_tokens().tolist())
    assert ENC.encode_ordinary("{")[0] in allowed and ENC.encode_ordinary("7")[0] in allowed
    assert ENDOFTEXT not in allowed
    with pytest.raises(TokenRejectedError):
        m.consume(ENC.encode_ordinary(" ")[0])


@pytest.mark.parametrize("answer", ['{"x": "a"}', "42", '{"x":"b"}'])
def test_two_formats_accept_either_answer(answer: str) -> None:
    for budget in (None, 50):
        m = TurnMatcher.from_conversation(two_formats(), GrammarOptions(analysis_max_tokens=budget))
        m.consume_all(ids("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"))
        m.consume_all(ids(FINAL_HEAD + answer + "<|return|>"))
        assert m.is_finished


def test_formats_keep_their_own_refs() -> None:
    tag = {
        "type": "object",
        "$defs": {"t": {"enum": ["a", "b"]}},
        "properties": {"tag": {"$ref": "#/$defs/t"}},
        "required": ["tag"],
        "additionalProperties": False,
    }
    size = {
        "type": "object",
        "$defs": {"t": {"type": "integer"}},
        "properties": {"size": {"$ref": "#/$defs/t"}},
        "required": ["size"],
        "additionalProperties": False,
    }
    dev = DeveloperContent.new().with_response_format("tag", tag).with_response_format("size", size)
    conv = Conversation.from_messages([Message.from_role_and_content(Role.DEVELOPER, dev)])
    for answer, ok in [
        ('{"tag": "a"}', True),
        ('{"size": 3}', True),
        ('{"tag": 3}', False),
        ('{"size": "a"}', False),
    ]:
        m = TurnMatcher.from_conversation(conv)
        m.consume_all(ids(FINAL_HEAD))
        tokens = ids(answer + "<|return|>")
        if ok:
            m.consume_all(tokens)
            assert m.is_finished
        else:
            with pytest.raises(TokenRejectedError):
                m.consume_all(tokens)


def test_one_format_and_tool_arguments_refuse_leading_whitespace() -> None:
    dev = DeveloperContent.new().with_response_format("n", {"type": "integer"})
    conv = Conversation.from_messages([Message.from_role_and_content(Role.DEVELOPER, dev)])
    m = TurnMatcher.from_conversation(conv)
    m.consume_all(ids(FINAL_HEAD))
    assert not m.allows(ENC.encode_ordinary(" ")[0])
    tool = h.ToolDescription.new("f", "F.", {"type": "object"})
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([tool])
            )
        ]
    )
    m = TurnMatcher.from_conversation(conv)
    m.consume_all(ids("<|channel|>commentary to=functions.f <|constrain|>json<|message|>"))
    assert not m.allows(ENC.encode_ordinary(" ")[0])


# -- special tokens outside the format: never in a mask, never consumed ----------------------


def test_no_foreign_special_token_even_when_the_grammar_names_one() -> None:
    m = TurnMatcher('start: <[199999]> | <[200018]> | "a" <[200002]>')
    mask = m.fill_mask()
    assert foreign_specials(mask) == set()
    assert ENC.encode_ordinary("a")[0] in m.allowed_tokens()
    for token in (ENDOFTEXT, 200_018):
        assert not m.allows(token)
        with pytest.raises(TokenRejectedError, match="special token"):
            m.consume(token)
    m.consume_all(ids("a<|return|>"))
    assert m.is_finished


# -- an llguidance failure stays in the turn that caused it ----------------------------------

# The shape harmonia wrote before: several response formats as alternatives of several
# %json rules, with a token-bounded analysis rule. llguidance 1.9 panics computing
# the mask after the final header ("grammar stack empty for non-root grammar"), and
# the panic breaks the lexer state every copy of the compiled grammar shares.
_XG = '{"whitespace_pattern": "[\\\\x20\\\\x0A\\\\x0D\\\\x09]{0,32}"}'
PANICKY = f"""start: (analysis <[200006]> "assistant")* final
analysis: <[200005]> "analysis" <[200008]> analysis_text <[200007]>
analysis_text[max_tokens=50]: TEXT
final: <[200005]> "final" <[200008]> final_json <[200002]>
final_json: format_1 | format_2
format_1: %json {{"type": "integer", "x-guidance": {_XG}}}
format_2: %json {{"type": "object", "x-guidance": {_XG}}}
TEXT: /(?s:.*)/
"""


def test_an_engine_failure_raises_for_its_turn_only() -> None:
    innocent = TurnMatcher(PANICKY)  # copied from the same cached template
    busy = TurnMatcher(PANICKY)
    busy.consume_all(ids("<|channel|>analysis<|message|>Hm."))
    culprit = TurnMatcher(PANICKY)
    culprit.consume_all(ids(FINAL_HEAD))
    try:
        culprit.fill_mask()
    except GrammarEngineError as error:
        assert error.position == 3
        assert "llguidance failed" in str(error)
    else:
        pytest.skip("this llguidance no longer panics on the grammar (fixed upstream)")
    # The failed matcher is never used again, until reset.
    with pytest.raises(GrammarEngineError):
        culprit.allows(ENC.encode_ordinary("1")[0])
    with pytest.raises(GrammarEngineError):
        culprit.consume(ENC.encode_ordinary("1")[0])
    # Matchers of the same grammar, older or newer, are unaffected.
    assert innocent.allowed_tokens().tolist() == [200_005]
    assert TurnMatcher(PANICKY).allowed_tokens().tolist() == [200_005]
    busy.consume_all(ids(" Ok.<|end|><|start|>assistant"))
    assert busy.allowed_tokens().tolist() == [200_005]
    culprit.reset()
    assert culprit.allowed_tokens().tolist() == [200_005]


@needs_llguidance_1_9
def test_a_failed_engine_never_hands_out_its_eos_mask() -> None:
    m = TurnMatcher(PANICKY)
    m.consume_all(ids(FINAL_HEAD))
    out = np.full(6285, -1, dtype=np.int32)
    with pytest.raises(GrammarEngineError):
        m.fill_mask(out)
    # Whatever the engine wrote, the caller got an error, not a mask to sample from;
    # and no later call hands one out.
    with pytest.raises(GrammarEngineError):
        m.fill_mask(out)


# -- JSON keys: never escaped, never repeated -------------------------------------------------

QUICK_START = h.ToolDescription.new(  # additionalProperties left open, as in the docs
    "get_weather",
    "Gets the weather.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
AT_LEAST_TWO = h.ToolDescription.new("tag", "Tags.", {"type": "object", "minProperties": 2})
TOOLS = Conversation.from_messages(
    [
        Message.from_role_and_content(
            Role.DEVELOPER, DeveloperContent.new().with_function_tools([QUICK_START, AT_LEAST_TWO])
        )
    ]
)


def starting_with(prefix: bytes) -> list[int]:
    table = ENC.tokenizer.token_bytes_table
    return [i for i, b in enumerate(table[:199_998]) if b.startswith(prefix)]


def call_head(tool: str) -> list[int]:
    return ids(f"<|channel|>commentary to=functions.{tool} <|constrain|>json<|message|>")


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_weather", '{"city": "Tokyo", "\\u0063ity": 42}'),  # json.loads: {"city": 42}
        ("get_weather", '{"city": "Tokyo", "x": 1, "x": 2}'),
        ("tag", '{"a": 1, "a": 2}'),  # one property after parsing: breaks minProperties
        ("tag", '{"a": {"b": 1, "b": 2}, "c": 3}'),
        ("tag", '{"\\u00e9": 1, "b": 2}'),
    ],
)
def test_keys_that_parse_otherwise_are_refused(tool: str, args: str) -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head(tool))
    with pytest.raises(TokenRejectedError, match="JSON key"):
        m.consume_all(ids(args + "<|call|>"))


@needs_llguidance_1_9
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_weather", '{"city": "T\\u00f6ky\\u014d \\"\\\\", "x": 1, "y": 2}'),  # escaped values
        ("tag", '{"a": 1, "b": {"a": 2}, "ab": 3}'),  # a key again in another object
    ],
)
def test_escaped_values_and_distinct_keys_are_accepted(tool: str, args: str) -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head(tool))
    m.consume_all(ids(args + "<|call|>"))
    assert m.is_finished


def test_mask_clears_escapes_and_repeats_inside_a_key() -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head("tag") + ids('{"ab": 1, "'))
    allowed = set(m.allowed_tokens().tolist())
    a, backslash = ENC.encode_ordinary("a")[0], ENC.encode_ordinary("\\")[0]
    assert a in allowed and m.allows(a)
    assert backslash not in allowed and not m.allows(backslash)
    m.consume_all(ids("ab"))
    closing = starting_with(b'"')  # '"', '":', '": ', ...: each would complete "ab" again
    allowed = set(m.allowed_tokens().tolist())
    assert not any(t in allowed or m.allows(t) for t in closing)
    assert m.allows(ENC.encode_ordinary("c")[0])
    m.consume_all(ids('c": 2}<|call|>'))
    assert m.is_finished


def test_mask_is_within_what_allows_says() -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head("tag") + ids('{"a": "x'))
    mask = m.allowed_tokens()
    assert all(m.allows(int(t)) for t in mask[:: max(1, mask.size // 3000)])
    quote_key = ENC.encode_ordinary('","')[0]  # closes the value, opens a new key
    assert quote_key in mask and m.allows(quote_key)
    m.consume(quote_key)
    m.consume(ENC.encode_ordinary("a")[0])
    assert not any(m.allows(t) for t in starting_with(b'"'))


def test_a_token_holding_a_whole_repeated_key_is_cleared() -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head("tag") + ids('{"": 1, '))
    empty_key = ENC.encode_ordinary('""')[0]  # a token with the whole key "" in it
    assert ENC.decode([empty_key]) == '""'
    assert empty_key not in m.allowed_tokens() and not m.allows(empty_key)
    fresh = TurnMatcher.from_conversation(TOOLS)
    fresh.consume_all(call_head("tag") + ids('{"a": 1, '))
    assert empty_key in fresh.allowed_tokens() and fresh.allows(empty_key)


def test_copy_and_rollback_keep_the_keys_right() -> None:
    m = TurnMatcher.from_conversation(TOOLS)
    m.consume_all(call_head("tag") + ids('{"a": 1, "'))
    twin = m.copy()
    m.rollback(len(ids('{"a": 1, "')))
    m.consume_all(ids('{"b": 1, "a": 2}<|call|>'))  # "a" is new again after the rollback
    assert m.is_finished
    with pytest.raises(TokenRejectedError):
        twin.consume_all(ids('a": 2}'))


def test_exported_grammar_carries_the_key_rule() -> None:
    grammar = build_turn_grammar(TOOLS)
    assert grammar.splitlines()[-1] == (
        "// harmonia-json-content: functions.get_weather functions.tag"
    )
    m = TurnMatcher(grammar)
    m.consume_all(call_head("tag") + ids('{"a": 1, '))
    with pytest.raises(TokenRejectedError, match="JSON key"):
        m.consume_all(ids('"a": 2}'))
    # Without the marker line, only llguidance's checks apply.
    bare = TurnMatcher(grammar.rsplit("// harmonia-json-content:", 1)[0])
    bare.consume_all(call_head("tag") + ids('{"a": 1, "a": 2}<|call|>'))
    assert bare.is_finished


def test_structured_final_answer_keys_follow_the_rule() -> None:
    m = TurnMatcher.from_conversation(two_formats())
    m.consume_all(ids(FINAL_HEAD + '{"x": "1", '))
    with pytest.raises(TokenRejectedError, match="JSON key"):
        m.consume_all(ids('"x": "2"}'))


@pytest.mark.parametrize("name", ['say "hi"', "back\\slash", "new\nline"])
def test_property_names_that_need_escapes_are_refused_up_front(name: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "object", "properties": {name: {}}}}}
    tool = h.ToolDescription.new("f", "F.", schema)
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([tool])
            )
        ]
    )
    with pytest.raises(h.InputError, match="needs an escape"):
        build_turn_grammar(conv)


def test_key_rule_follows_recipients_with_odd_characters() -> None:
    tool = h.ToolDescription.new("less<than", "Odd name.", {"type": "object"})
    conv = Conversation.from_messages(
        [
            Message.from_role_and_content(
                Role.DEVELOPER, DeveloperContent.new().with_function_tools([tool])
            )
        ]
    )
    m = TurnMatcher.from_conversation(conv)
    m.consume_all(call_head("less<than") + ids('{"a": 1, '))
    with pytest.raises(TokenRejectedError, match="JSON key"):
        m.consume_all(ids('"a": 2}'))
