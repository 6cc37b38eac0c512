"""Turn N+1's prompt starts with turn N's prompt and completion, token for token.

That is what lets an engine's prefix cache hit on every turn. Under the
default settings it holds for a turn that ended in a tool call (the reasoning
of a turn in progress is kept), even when the model wrote the call in a form
the renderer never produces; the settings that break it are shown too.
"""

from __future__ import annotations

from serve_support import ENC, LOOKUP_CALL, LOOKUP_LOOSE, MODEL

from harmonia.openai_compat import PromptOptions

TOOL = LOOKUP_LOOSE
CALL = LOOKUP_CALL
FINAL = (
    "<|channel|>analysis<|message|>Easy.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Done.<|return|>"
)


def two_turns(server, reply, second_input):
    client = server.client()
    server.book.add(reply)
    first = client.responses.create(model=MODEL, input="Define x", tools=[TOOL])
    turn_n = server.engine.generations[-1]
    prompt_n = list(server.engine.prompts[-1])
    completion_n = list(turn_n.tokens)
    if callable(second_input):
        second_input = second_input(first)
    server.book.add("<|channel|>final<|message|>ok<|return|>")
    client.responses.create(
        model=MODEL, previous_response_id=first.id, input=second_input, tools=[TOOL]
    )
    return prompt_n, completion_n, list(server.engine.prompts[-1])


def call_output(first):
    (call,) = [item for item in first.output if item.type == "function_call"]
    return [{"type": "function_call_output", "call_id": call.call_id, "output": "a letter"}]


def test_tool_turn_prefix_holds_by_default(srv):
    prompt_n, completion_n, prompt_next = two_turns(srv, CALL, call_output)
    assert completion_n[-1] == ENC.encode("<|call|>", allowed_special="all")[0]
    assert prompt_next[: len(prompt_n) + len(completion_n)] == prompt_n + completion_n
    # The canonical rendering would differ: the sampled form was kept on purpose.
    assert "to=functions.lookup<|channel|>" not in ENC.decode(prompt_next)


def test_final_turn_prefix_holds_with_keep_all(make_server):
    server = make_server(cot_policy="keep_all")
    prompt_n, completion_n, prompt_next = two_turns(server, FINAL, "Thanks!")
    end = ENC.encode("<|end|>", allowed_special="all")
    # In history a final answer ends with <|end|> where sampling stopped at <|return|>.
    expected = prompt_n + completion_n[:-1] + end
    assert prompt_next[: len(expected)] == expected


def test_what_breaks_the_prefix(srv, make_server):
    # The harmony guide's CoT rule (the default) drops a finished turn's reasoning.
    prompt_n, completion_n, prompt_next = two_turns(srv, FINAL, "Thanks!")
    assert prompt_next[: len(prompt_n)] == prompt_n
    assert prompt_next[: len(prompt_n) + len(completion_n) - 1] != prompt_n + completion_n[:-1]
    assert "Easy." not in ENC.decode(prompt_next[len(prompt_n) :])
    # A date line in the system message changes the very first message once a day.
    monday = make_server(prompt_options=PromptOptions(conversation_start_date="2026-11-23"))
    tuesday = make_server(prompt_options=PromptOptions(conversation_start_date="2026-11-24"))
    prompts = []
    for server in (monday, tuesday):
        server.client().responses.create(model=MODEL, input="Hi")
        prompts.append(list(server.engine.prompts[-1]))
    first_difference = next(i for i, (a, b) in enumerate(zip(*prompts, strict=False)) if a != b)
    assert first_difference < 40  # inside the system message: nothing after it can be reused
