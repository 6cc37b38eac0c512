"""What a client is streamed and what the server executes always agree.

Over random and mutated completions: the Responses stream a server sends (its
``OutputAssembler``) and the agent loop following the stream's reading
(``ItemsSampled``, the server's tool loop) name the same calls, and a tool runs
exactly when the stream's last item is a call the turn ended on. Over the
unmutated ones, the agent loop reading the ids itself (the library's ``Agent``,
a strict parser) agrees with both.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harmonia
from harmonia import Conversation, Message, Role
from harmonia._turn import api_name, clean_recipient
from harmonia.agent import (
    AgentLoop,
    Finished,
    GenerationFinished,
    ItemsSampled,
    RunTool,
    Start,
    Step,
    TokensSampled,
    ToolCallStarted,
)
from harmonia.engines import Finish, FinishReason
from harmonia.openai_compat import ResponseStream
from harmonia.tools import is_tool_call
from harmonia.vocabulary import ACTION_STOP_IDS, CALL_ID, STOP_IDS

ENC = harmonia.load_harmony_encoding("HarmonyGptOss")
CHAT = Conversation.from_messages([Message.from_role_and_content(Role.USER, "hi")])

CHANNELS = st.sampled_from(["analysis", "commentary", "final", "notes", ""])
WORDS = st.sampled_from(
    [
        "",
        " to=functions.get_weather",
        " to=python",
        " to=browser.search",
        " get_weather",
        " markdown",
        " json",
        " code",
        " system",
        " text",
        " all",
        " to=",
        " to=functions.f <|constrain|>json",
    ]
)
TYPES = st.sampled_from(["", " <|constrain|>json", " code", " json"])
STOPS = st.sampled_from(["<|end|>", "<|call|>", "<|return|>"])
BODIES = st.sampled_from(["hello", '{"a": 1}', "print(1)", "x <|channel|> y", ""])
MESSAGE = st.tuples(st.booleans(), CHANNELS, WORDS, TYPES, BODIES, STOPS)
SPECIALS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>"]
PIECES = [ENC.encode(s, allowed_special="all")[0] for s in SPECIALS]
PIECES += [ENC.encode_ordinary(w)[0] for w in ("assistant", " to", "=", "functions", " json")]


def completion(messages: list[tuple[bool, str, str, str, str, str]]) -> list[int]:
    text = ""
    for n, (before, channel, word, ctype, body, stop) in enumerate(messages):
        head = "" if n == 0 else "<|start|>assistant"
        # The recipient goes after the channel, or in the role part of the header.
        if before:
            head += word + (f"<|channel|>{channel}" if channel else "") + ctype
        else:
            head += (f"<|channel|>{channel}" if channel else "") + word + ctype
        text += f"{head}<|message|>{body}{stop}"
    return ENC.encode(text, allowed_special="all")


def mutate(tokens: list[int], edits: list[tuple[int, int, int]]) -> list[int]:
    out = list(tokens)
    for where, what, piece in edits:
        at = where % (len(out) + 1)
        if what == 0:
            out.insert(at, PIECES[piece % len(PIECES)])
        elif what == 1 and at < len(out):
            del out[at]
        elif at < len(out):
            out[at] = PIECES[piece % len(PIECES)]
    return out


def engine_output(tokens: list[int]) -> list[int]:
    """What an engine would return: up to the first <|return|> or <|call|>."""
    for n, token in enumerate(tokens):
        if token in ACTION_STOP_IDS:
            return tokens[: n + 1]
    return tokens


def finish(tokens: list[int]) -> GenerationFinished:
    if tokens and tokens[-1] in STOP_IDS:
        return GenerationFinished(Finish(FinishReason.STOP, tokens[-1]))
    return GenerationFinished(Finish(FinishReason.LENGTH))


def run(loop: AgentLoop, step: Step) -> tuple[list[Message], Message | None, bool]:
    """(calls announced, the call run, whether the loop ended with an error)."""
    events = list(step.events)
    if not isinstance(step.action, Finished):
        step = loop.send(finish_for[id(loop)])
        events += step.events
    started = [e.message for e in events if isinstance(e, ToolCallStarted)]
    ran = step.action.call if isinstance(step.action, RunTool) else None
    failed = loop.result is not None and loop.result.error is not None
    return started, ran, failed


finish_for: dict[int, GenerationFinished] = {}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(MESSAGE, min_size=1, max_size=3),
    edits=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 2), st.integers(0, 20)), max_size=3
    ),
)
def test_what_is_streamed_is_what_runs(
    messages: list[tuple[bool, str, str, str, str, str]], edits: list[tuple[int, int, int]]
) -> None:
    tokens = engine_output(mutate(completion(messages), edits))
    if not tokens:
        return
    # The server: one stream reads the ids; its tool loop follows that reading.
    stream = ResponseStream(ENC, model="m", ids="seed", created_at=0, builtin_calls="native")
    served = AgentLoop(ENC, CHAT)
    served.send(Start())
    _, read = stream.feed_read(tokens)
    finish_for[id(served)] = finish(tokens)
    calls, ran, _ = run(served, served.send(ItemsSampled(len(tokens), tuple(read))))
    stream.finish()
    items = [item for item in stream.response["output"] if item["type"] != "reasoning"]
    # Every call the loop announces is a complete call item the client sees, in
    # order (a call cut off by the end of the output is shown incomplete, never run).
    call_items = [i for i in items if i["type"] != "message" and i["status"] == "completed"]
    assert len(calls) == len(call_items)
    for call, item in zip(calls, call_items, strict=True):
        name = api_name(clean_recipient(call.recipient or ""))
        assert item.get("name", name) == name or item["type"] != "function_call"
        assert is_tool_call(call)
    # A tool runs exactly when the turn ended with <|call|> on a streamed call item.
    ended_on_call = tokens[-1] == CALL_ID and bool(items) and items[-1]["type"] != "message"
    last_done = [e.item for e in read if isinstance(e, harmonia.ItemDone)]
    ended_on_call = ended_on_call and bool(last_done) and last_done[-1].kind == "call"
    assert (ran is not None) is ended_on_call
    if ran is not None:
        assert ran.text == (items[-1].get("arguments") or ran.text)
    # The library's agent reads the ids itself (strictly): when its parser accepts
    # well-formed messages, it announces and runs what the server does. (On
    # mutated ids, or a special token inside a body, the strict parser may end
    # messages elsewhere than the lenient one; the header reading is the same.)
    if edits or any("<|" in body for *_, body, _ in messages):
        return
    agent = AgentLoop(ENC, CHAT)
    agent.send(Start())
    finish_for[id(agent)] = finish(tokens)
    own_calls, own_ran, failed = run(agent, agent.send(TokensSampled(tuple(tokens))))
    if not failed:
        assert [m.recipient for m in own_calls] == [m.recipient for m in calls]
        assert (own_ran is None) is (ran is None)
        if own_ran is not None and ran is not None:
            assert (own_ran.recipient, own_ran.text) == (ran.recipient, ran.text)
    finish_for.clear()
