"""The built-in tools plug: a ToolLoop runs the turn when a request declares web_search."""

from __future__ import annotations

from typing import Any

from serve_support import MODEL

from harmonia.serve import ToolLoop, Turn


class OneShotLoop:
    """A stand-in loop: one generation, no tool run; counts its turns and admission."""

    def __init__(self) -> None:
        self.turns = 0
        self.running_seen: list[int] = []
        self.admission: Any = None

    async def run(self, turn: Turn) -> Any:
        # Public types only: the turn has the engine, the prompt, the sampling and the stream.
        self.turns += 1
        self.running_seen.append(self.admission.running)
        generation = turn.engine.generate(turn.prompt, turn.params)
        async with generation:
            async for ids in generation:
                yield turn.stream.feed_many(ids)
        yield turn.stream.finish()


def test_tool_loop_runs_builtin_turns(make_server):
    loop = OneShotLoop()
    assert isinstance(loop, ToolLoop)
    server = make_server(tool_loop=loop)
    loop.admission = server.app.state.service.admission
    client = server.client()
    server.book.add("<|channel|>final<|message|>Found it.<|return|>")
    tools = [{"type": "web_search_preview"}]
    response = client.responses.create(model=MODEL, input="Search x", tools=tools)
    assert response.output_text == "Found it."
    assert loop.turns == 1 and loop.running_seen == [1]  # it ran inside an admission slot
    assert server.app.state.service.admission.running == 0
    # The prompt declared the built-in browser tool.
    from serve_support import ENC

    assert "## browser" in ENC.decode(list(server.engine.prompts[-1]))
    # Streaming and stored, like any response.
    server.book.add("<|channel|>final<|message|>Again.<|return|>")
    events = list(client.responses.create(model=MODEL, input="x", tools=tools, stream=True))
    assert events[-1].type == "response.completed"
    assert client.responses.retrieve(events[-1].response.id).output_text == "Again."
    # Plain requests do not go through the loop.
    client.responses.create(model=MODEL, input="no tools")
    assert loop.turns == 2
