"""Drives one response's :class:`~harmonia.agent.AgentLoop` and shapes its stream events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harmonia import Conversation, EngineError, Message
from harmonia.agent import (
    AgentLimits,
    AgentLoop,
    Cancel,
    Finished,
    GenerationFinished,
    ItemsSampled,
    RunTool,
    Sample,
    Start,
    StopReason,
    ToolResult,
)
from harmonia.engines import Constraint, Finish, FinishReason

if TYPE_CHECKING:
    from harmonia.agent import AgentResult, Step
    from harmonia.engines import SamplingParams
    from harmonia.tools import Toolbox
    from harmonia.tools.browser import BrowserTool

    from ..openai_compat import ResponseStream
    from ._service import Prepared, Service

JsonDict = dict[str, Any]

_BUILTIN_COMPLETED = (
    "response.web_search_call.completed",
    "response.code_interpreter_call.completed",
)
#: Stop reasons that cut the response short (``incomplete``).
_CUT = (StopReason.LENGTH, StopReason.MAX_TOKENS, StopReason.MAX_STEPS, StopReason.MAX_SECONDS)


class Driver:
    """One response: the agent loop's actions carried out, the stream's events reshaped."""

    def __init__(
        self,
        service: Service,
        prepared: Prepared,
        params: SamplingParams,
        stream: ResponseStream,
        toolbox: Toolbox,
        browser: BrowserTool | None,
        limits: AgentLimits | None,
    ) -> None:
        self.service = service
        self.stream = stream
        self.toolbox = toolbox
        self.browser = browser
        # The request's constraint (strict functions, a JSON format, tool_choice) holds for
        # the first step; the later steps' (strict, but free to answer) is built in events().
        self._prepared = prepared
        self._first: Constraint | None = prepared.constraint
        self._later: Constraint | None = None
        self._steps_constrained = 0
        limits = limits or AgentLimits()
        # max_output_tokens bounds the whole response (every step), as OpenAI's does.
        budget = min(limits.max_tokens, params.max_tokens)
        self.loop = AgentLoop(
            service.enc,
            prepared.conversation,
            params=params,
            limits=replace(limits, max_tokens=budget),
            constraint=self._constraint,
        )
        # The header the prompt ends with; the stream reads the steps as one turn.
        self._header = service.enc.encode("<|start|>assistant", allowed_special="all")
        self._seq: int | None = None
        self._held: list[JsonDict] = []
        self._held_ids: set[str] = set()
        self._annotations: dict[str, list[JsonDict]] = {}
        self._deadline: float | None = None
        # When the response started, until its first token is counted (the TTFT metric).
        self._started: float | None = None

    def _constraint(self, conversation: Conversation) -> Constraint | None:
        """Every step's constraint: the request's first, then the later steps' one.

        The turn grammar comes from the system and developer messages, which a
        tool reply does not change, so ``conversation`` is not needed.
        """
        self._steps_constrained += 1
        return self._first if self._steps_constrained == 1 else self._later

    def _late(self) -> bool:
        return self._deadline is not None and time.monotonic() > self._deadline

    async def events(self) -> AsyncIterator[list[JsonDict]]:
        self._started = time.monotonic()
        # Built off the event loop (a grammar compiles), before the first step.
        self._later = await asyncio.to_thread(self.service.later_constraint, self._prepared)
        seconds = self.loop.limits.max_seconds
        self._deadline = None if seconds is None else time.monotonic() + seconds
        step = self.loop.send(Start())
        steps = 0
        while True:
            action = step.action
            if isinstance(action, Finished):
                yield self._finish(action.result)
                return
            if self._late():  # the wall-time limit counts tools too
                step = self.loop.send(Cancel(StopReason.MAX_SECONDS))
                continue
            if isinstance(action, RunTool):
                pages = 0 if self.browser is None else len(self.browser.state)
                reply = await self.toolbox.dispatch(action.call)
                if reply is not None:
                    self._complete_call(reply, pages)
                    released, self._held = self._held, []
                    self._held_ids.clear()
                    if released:
                        yield self._number(released)
                step = self.loop.send(ToolResult(reply))
                continue
            assert isinstance(action, Sample), step
            if steps:
                out = self._shape(self.stream.feed_many(self._header))  # no item events
                if out:
                    yield out
            steps += 1
            async for batch, next_step in self._sample(action):
                if batch:
                    yield batch
                step = next_step

    async def _sample(self, action: Sample) -> AsyncIterator[tuple[list[JsonDict], Step]]:
        """Yield (events, the loop's step) per engine step; the last has the finish."""
        metrics = self.service.metrics
        started = time.monotonic()
        generation = self.service.engine.generate(
            action.prompt, action.params, constraint=action.constraint
        )
        try:
            async with generation:  # leaving early (a client gone) stops the engine
                async for ids in generation:
                    if self._started is not None:  # the response's first token
                        metrics.first_token(time.monotonic() - self._started)
                        self._started = None
                    # Read once: what is shown is what runs.
                    out, read = self.stream.feed_read(ids, generation.last_logprobs)
                    step = self.loop.send(ItemsSampled(len(ids), tuple(read)))
                    yield self._shape(out), step
                    if self._late():  # leaving the block stops the engine
                        yield [], self.loop.send(Cancel(StopReason.MAX_SECONDS))
                        return
        finally:  # every step counts, however it ended
            metrics.generation(len(generation.tokens), time.monotonic() - started)
        finish = generation.finish or Finish(FinishReason.CANCELLED)
        yield [], self.loop.send(GenerationFinished(finish))

    def _finish(self, result: AgentResult) -> list[JsonDict]:
        if result.stop_reason is StopReason.ERROR and isinstance(result.error, EngineError):
            raise result.error
        held, self._held = self._held, []
        out = self._number(held)
        out += self._shape(
            self.stream.finish(finished=False if result.stop_reason in _CUT else None)
        )
        response = self.stream.response
        usage = response.get("usage")
        if isinstance(usage, dict):
            # The loop counts what the engine did: every step's prompt and output.
            prompt, completion = result.usage.prompt_tokens, result.usage.completion_tokens
            usage.update(
                input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
            )
        return out

    # -- events ----------------------------------------------------------------------------

    def _number(self, events: list[JsonDict]) -> list[JsonDict]:
        for event in events:
            if self._seq is None:
                self._seq = int(event["sequence_number"])
            event["sequence_number"] = self._seq
            self._seq += 1
        return events

    def _shape(self, events: list[JsonDict]) -> list[JsonDict]:
        """Hold a built-in call's end until its tool ran; add the answer's citations."""
        out: list[JsonDict] = []
        for event in events:
            kind = event["type"]
            if kind in _BUILTIN_COMPLETED:
                self._held_ids.add(event["item_id"])
                self._held.append(event)
                continue
            if kind == "response.output_item.done" and event["item"].get("id") in self._held_ids:
                self._held.append(event)
                continue
            if kind == "response.output_text.done":
                out += self._cite(event)
            elif kind == "response.content_part.done":
                annotations = self._annotations.get(event["item_id"])
                if annotations:
                    # The part is the item's own (the response's output shares it).
                    event["part"]["annotations"] = annotations
            out.append(event)
        return self._number(out)

    def _cite(self, event: JsonDict) -> list[JsonDict]:
        """``response.output_text.annotation.added`` for each citation of a page seen."""
        if self.browser is None:
            return []
        _, citations = self.browser.convert_citations(event["text"], style="keep")
        annotations = [c.to_annotation() for c in citations]
        self._annotations[event["item_id"]] = annotations
        return [
            {
                "type": "response.output_text.annotation.added",
                "sequence_number": 0,  # numbered by _shape
                "item_id": event["item_id"],
                "output_index": event["output_index"],
                "content_index": event["content_index"],
                "annotation_index": index,
                "annotation": annotation,
            }
            for index, annotation in enumerate(annotations)
        ]

    def _complete_call(self, reply: Message, pages: int) -> None:
        """Put what the tool did on its held item: python's output, the page a browser opened.

        ``pages``: how many pages the browser had before the call.
        """
        for event in self._held:
            item = event.get("item")
            if event["type"] != "response.output_item.done" or not isinstance(item, dict):
                continue
            if item.get("type") == "code_interpreter_call":
                text = "".join(getattr(part, "text", "") for part in reply.content)
                item["outputs"] = [{"type": "logs", "logs": text}]
            action = item.get("action")
            if (
                item.get("type") == "web_search_call"
                and isinstance(action, dict)
                and action.get("type") in ("open_page", "find_in_page")
                and self.browser is not None
                and len(self.browser.state) > pages
            ):
                url = self.browser.state.page().url
                if url:  # a page the call opened (a search-results page has none)
                    action["url"] = url
