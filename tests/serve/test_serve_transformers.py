"""The server over the real transformers engine, with teacher forcing for determinism.

A random tiny gpt-oss (real vocabulary) cannot answer anything, so each step
allows exactly the next id of a scripted reply *and* what the server's strict
grammar allows: both masks go through the engine's real masked-decoding path.
An output the grammar refuses leaves no allowed id, and the engine fails.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import openai
import pytest
from serve_support import MODEL, Book

torch = pytest.importorskip("torch", reason="torch is not installed (harmonia[transformers])")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (harmonia[transformers])"
)
pytest.importorskip("llguidance", reason="llguidance is not installed (harmonia[constrained])")

from harmonia.constrained import MASK_WORDS  # noqa: E402
from harmonia.engines import Constraint  # noqa: E402


class Forced:
    """Allows only ``script[position]``, intersected with ``other``'s mask when there is one."""

    def __init__(self, script: tuple[int, ...], other: Any = None, position: int = 0) -> None:
        self.script, self.other, self.position = script, other, position

    @property
    def is_finished(self) -> bool:
        return self.position >= len(self.script)

    def fill_mask(self, out: Any = None) -> Any:
        if out is None:
            out = np.zeros(MASK_WORDS, dtype=np.int32)
        out[:] = 0
        if not self.is_finished:
            token = self.script[self.position]
            out[token // 32] = np.int32(np.uint32(1 << (token % 32)).view(np.int32))
        if self.other is not None:
            out &= self.other.fill_mask()
        return out

    def consume(self, token: int) -> None:
        assert token == self.script[self.position]
        self.position += 1
        if self.other is not None:
            self.other.consume(token)

    def copy(self) -> Forced:
        other = None if self.other is None else self.other.copy()
        return Forced(self.script, other, self.position)


class ForcingEngine:
    """The transformers engine, teacher-forced to the book's next reply."""

    name = "transformers-forced"

    def __init__(self, inner: Any, book: Book) -> None:
        self.inner, self.book = inner, book
        self.constrained: list[bool] = []

    def generate(self, prompt: Any, params: Any = None, *, constraint: Any = None) -> Any:
        if not self.book.queue:  # the warm-up: one free token
            return self.inner.generate(prompt, params)
        script = self.book(tuple(prompt)).tokens
        self.constrained.append(constraint is not None)
        grammar = None if constraint is None else constraint.new_matcher()
        forced = Constraint(matcher=Forced(script, grammar))
        return self.inner.generate(prompt, params, constraint=forced)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(scope="module")
def hf_server():
    from serve_support import start_server

    from harmonia.engines.transformers import TransformersEngine, random_gpt_oss

    model = random_gpt_oss(seed=0)
    server = start_server(lambda book: ForcingEngine(TransformersEngine(model), book))
    yield server
    server.stop()


FORMAT = {
    "type": "json_schema",
    "name": "city",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def test_strict_output_through_the_real_mask(hf_server):
    client = hf_server.client()
    hf_server.book.add(
        "<|channel|>analysis<|message|>Paris.<|end|>"
        '<|start|>assistant<|channel|>final<|message|>{"city": "Paris"}<|return|>'
    )
    response = client.responses.create(model=MODEL, input="Capital?", text={"format": FORMAT})
    assert json.loads(response.output_text) == {"city": "Paris"}
    assert hf_server.engine.constrained[-1] is True
    # Streaming, the same path.
    hf_server.book.add('<|channel|>final<|message|>{"city": "Rome"}<|return|>')
    with client.responses.stream(model=MODEL, input="Capital?", text={"format": FORMAT}) as s:
        for _ in s:
            pass
        assert json.loads(s.get_final_response().output_text) == {"city": "Rome"}
    # A reply the schema forbids: the grammar's mask leaves no id, the engine fails.
    hf_server.book.add('<|channel|>final<|message|>{"town": "Rome"}<|return|>')
    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.create(model=MODEL, input="Capital?", text={"format": FORMAT})
    assert "mask is empty" in caught.value.message


def test_unconstrained_chat_and_tool_call(hf_server):
    client = hf_server.client()
    hf_server.book.add("<|channel|>final<|message|>Hi!<|return|>")
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}])
    assert chat.choices[0].message.content == "Hi!"
    assert hf_server.engine.constrained[-1] is False
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    hf_server.book.add(
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
    )
    call = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Call f"}],
        tools=[tool],
        tool_choice="required",
    )
    assert call.choices[0].message.tool_calls[0].function.name == "f"
    assert hf_server.engine.constrained[-1] is True
