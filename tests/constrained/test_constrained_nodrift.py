"""No drift: every valid turn harmonia renders is accepted by the mask, token by token.

Valid turns are drawn with hypothesis for the conversations of
``test_constrained_cases``: analysis messages and preambles with arbitrary text
(special-token spellings included), then a final answer or a call to a declared
tool, with arguments that satisfy its schema written compactly, with spaces,
indented, ASCII-escaped or not. Each message is rendered by ``enc.render``; the
first one's ``<|start|>assistant`` is dropped (the prompt ends with it) and a
final answer ends with ``<|return|>``, as the model writes it. The same turn in
gpt-oss's own header form (recipient after the channel) must be accepted too,
and both must parse back to the messages that were rendered.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from constrained_cases import CASES, ENC, Case, render_turn
from grammar_helpers import needs_llguidance_1_9
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as hs

from harmonia import Message, Role
from harmonia._tokenizer import special_tokens as st
from harmonia.constrained import TokenRejectedError

SETTINGS = settings(
    max_examples=int(os.environ.get("HARMONIA_NODRIFT_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SPELLINGS = ["<|end|>", "<|return|>", "<|call|>", "<|start|>assistant", "<|channel|>final"]
CHARACTERS = hs.characters(blacklist_categories=("Cs",))


def texts(max_size: int = 30) -> hs.SearchStrategy[str]:
    """Arbitrary text, often with special-token spellings in it."""
    piece = hs.one_of(hs.text(CHARACTERS, max_size=max_size), hs.sampled_from(SPELLINGS))
    return hs.lists(piece, max_size=3).map("".join)


# -- arguments that satisfy the schemas ----------------------------------------------------------

_short = hs.text(CHARACTERS, max_size=12)


def _order() -> hs.SearchStrategy[dict[str, Any]]:
    sku = hs.from_regex(r"\A[A-Z]{3}-[0-9]{2}\Z")
    item = hs.fixed_dictionaries({"sku": sku, "quantity": hs.integers(1, 99)})
    customer = hs.fixed_dictionaries(
        {"name": _short, "tier": hs.sampled_from(["free", "pro", "enterprise"])}
    )
    optional = {"gift": hs.booleans(), "note": hs.one_of(hs.none(), _short)}
    required = {"customer": customer, "items": hs.lists(item, min_size=1, max_size=4)}
    return hs.fixed_dictionaries(required, optional=optional)


ARGUMENTS: dict[str, hs.SearchStrategy[Any]] = {
    "functions.create_order": _order(),
    "functions.get_weather": hs.fixed_dictionaries(
        {"location": hs.text(CHARACTERS, max_size=40)},
        optional={
            "format": hs.sampled_from(["celsius", "fahrenheit"]),
            "days": hs.integers(1, 7),
        },
    ),
    "functions.get_location": hs.just({}),
    "functions.tag_items": hs.fixed_dictionaries(
        {
            "tags": hs.lists(hs.sampled_from(["red", "green", "blue"]), max_size=3),
            "mode": hs.just("replace"),
        },
        optional={
            "weights": hs.lists(hs.floats(allow_nan=False, allow_infinity=False), max_size=3)
        },
    ),
    "browser.search": hs.fixed_dictionaries(
        {"query": _short}, optional={"topn": hs.integers(1, 50), "source": _short}
    ),
    "browser.open": hs.fixed_dictionaries(
        {},
        optional={
            "id": hs.one_of(hs.integers(-1, 100), _short),
            "cursor": hs.integers(-1, 9),
            "loc": hs.integers(-1, 500),
            "num_lines": hs.integers(-1, 80),
            "view_source": hs.booleans(),
            "source": _short,
        },
    ),
    "browser.find": hs.fixed_dictionaries(
        {"pattern": _short}, optional={"cursor": hs.integers(-1, 9)}
    ),
}
SHOPPING_LIST = hs.fixed_dictionaries(
    {
        "items": hs.lists(
            hs.fixed_dictionaries(
                {"name": hs.text(CHARACTERS, max_size=24), "qty": hs.integers(1, 10**6)},
                optional={"unit": hs.sampled_from(["pcs", "kg", "l"])},
            ),
            max_size=5,
        ),
        "store": hs.sampled_from(["any", "market", "online"]),
    },
    optional={"urgent": hs.booleans()},
)
_WHITESPACE_RUN = re.compile(r"[ \t\n\r]+")


def schema_ordered(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with object keys in the order of the schema's ``properties``.

    llguidance fixes that order (its documented departure from JSON Schema), so
    only such JSON is accepted; gpt-oss writes keys in the declared order.
    """
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        order = list(properties)
        keys = sorted(value, key=lambda k: order.index(k) if k in order else len(order))
        return {k: schema_ordered(value[k], properties.get(k, {})) for k in keys}
    if isinstance(value, list):
        return [schema_ordered(v, schema.get("items", {})) for v in value]
    return value


@hs.composite
def json_text(
    draw: hs.DrawFn, value: Any, schema: dict[str, Any], max_whitespace: int | None
) -> str:
    """``value`` as JSON, in one of the ways clients and models write it."""
    value = schema_ordered(value, schema)
    style = draw(hs.sampled_from(["compact", "spaced", "indented"]))
    ascii_only = draw(hs.booleans())
    if style == "compact":
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only)
    elif style == "spaced":
        text = json.dumps(value, ensure_ascii=ascii_only)
    else:
        text = json.dumps(value, indent=2, ensure_ascii=ascii_only)
    # llguidance refuses a raw DEL in a string (valid JSON, documented limitation);
    # a DEL can only be inside a string, so escaping it keeps the same value.
    text = text.replace("\x7f", "\\u007f")
    if max_whitespace is not None:
        # Runs inside strings count too: conservative, never wrong.
        assume(all(len(m) <= max_whitespace for m in _WHITESPACE_RUN.findall(text)))
    return text


# -- valid turns ----------------------------------------------------------------------------------


def _message(text: str, channel: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


@hs.composite
def valid_turn(draw: hs.DrawFn, case: Case) -> list[Message]:
    """A turn the case's grammar must accept: analysis*, preamble*, then an ending."""
    bound = case.options.analysis_max_tokens
    messages = []
    for text in draw(hs.lists(texts(8 if bound else 30), max_size=3)):
        assume(bound is None or len(ENC.encode_ordinary(text)) <= bound)
        messages.append(_message(text, "analysis"))
    if case.tools or not case.response_formats:  # no preamble beside a structured answer
        messages += [_message(t, "commentary") for t in draw(hs.lists(texts(), max_size=2))]
    endings = ["final", *case.tools]
    ending = draw(hs.sampled_from(endings))
    if ending == "final":
        messages.append(draw(_final(case)))
    else:
        messages.append(draw(_call(case, ending)))
    return messages


@hs.composite
def _final(draw: hs.DrawFn, case: Case) -> Message:
    if not case.response_formats:
        return _message(draw(texts()), "final")
    schema = case.response_formats[0]
    answer = draw(json_text(draw(SHOPPING_LIST), schema, case.options.json_max_whitespace))
    message = _message(answer, "final")
    if draw(hs.booleans()):
        message.with_content_type("<|constrain|>json")
    return message


@hs.composite
def _call(draw: hs.DrawFn, case: Case, recipient: str) -> Message:
    if recipient.startswith("functions."):
        channel, content_type = "commentary", "<|constrain|>json"
    else:
        channel = draw(hs.sampled_from(["analysis", "commentary"]))
        types = [None, "code"] if recipient == "python" else [None, "code", "<|constrain|>json"]
        content_type = draw(hs.sampled_from(types))
    if recipient == "python":
        text = draw(texts())
    else:
        value, schema = draw(ARGUMENTS[recipient]), case.tools[recipient]
        assert schema is not None
        text = draw(json_text(value, schema, case.options.json_max_whitespace))
    message = _message(text, channel).with_recipient(recipient)
    if content_type is not None:
        message.with_content_type(content_type)
    return message


def model_form(messages: list[Message]) -> list[int]:
    """The turn as gpt-oss writes it: ``to=`` after the channel, specials by id."""
    tokens: list[int] = []
    for i, m in enumerate(messages):
        if i:
            tokens += [st.START, *ENC.encode_ordinary("assistant")]
        header = m.channel or ""
        if m.recipient is not None:
            header += f" to={m.recipient}"
        tokens += [st.CHANNEL, *ENC.encode_ordinary(header)]
        if m.content_type == "<|constrain|>json":
            tokens += [*ENC.encode_ordinary(" "), st.CONSTRAIN, *ENC.encode_ordinary("json")]
        elif m.content_type is not None:
            tokens += ENC.encode_ordinary(" " + m.content_type)
        tokens += [st.MESSAGE, *ENC.encode_ordinary(m.text)]
        tokens.append(st.END)
    last = messages[-1]
    tokens[-1] = st.CALL if last.recipient is not None else st.RETURN
    return tokens


def _fields(messages: list[Message]) -> list[tuple[object, ...]]:
    return [(m.author.role, m.channel, m.recipient, m.content_type, m.text) for m in messages]


def _accepts_all(case: Case, tokens: list[int]) -> None:
    matcher = case.matcher()
    matcher.consume_all(tokens)  # raises TokenRejectedError naming the token and position
    assert matcher.is_finished


def _no_drift(case: Case, messages: list[Message]) -> None:
    rendered = render_turn(messages)
    assert _fields(ENC.parse_messages_from_completion_tokens(rendered, Role.ASSISTANT)) == _fields(
        messages
    )
    _accepts_all(case, rendered)
    spoken = model_form(messages)
    assert _fields(ENC.parse_messages_from_completion_tokens(spoken, Role.ASSISTANT)) == _fields(
        messages
    )
    if messages[-1].recipient is not None and case.options.recipient_placement == "role":
        with pytest.raises(TokenRejectedError):  # the renderer's form only
            _accepts_all(case, spoken)
    else:
        _accepts_all(case, spoken)


@needs_llguidance_1_9
@SETTINGS
@given(hs.data())
@pytest.mark.parametrize("name", ["functions", "builtins", "response_format"])
def test_rendered_turns_are_accepted(name: str, data: hs.DataObject) -> None:
    case = CASES[name]
    _no_drift(case, data.draw(valid_turn(case)))


@needs_llguidance_1_9
@SETTINGS
@given(hs.data())
def test_channel_placement_accepts_the_model_form_only(data: hs.DataObject) -> None:
    case = CASES["everything"]  # recipient_placement="channel"
    messages = data.draw(valid_turn(case))
    _accepts_all(case, model_form(messages))
    rendered = render_turn(messages)
    if messages[-1].recipient is None:
        _accepts_all(case, rendered)
    else:  # the renderer's " to=R<|channel|>" header is refused
        with pytest.raises(TokenRejectedError):
            _accepts_all(case, rendered)
