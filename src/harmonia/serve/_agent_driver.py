"""One admitted turn: :class:`harmonia.agent.AgentRun` carries it out, this shows it.

A plain request is the agent driver with one step and no tools; built-in tools
(:class:`~harmonia.serve.AgentToolLoop`) give it a toolbox. The driver samples,
runs tools, enforces the wall-time limit and maps engine failures to a stop
reason; the :class:`Turn` is its hooks: it feeds the sampled ids to the API
stream (:meth:`Turn.sampled`, the one place), counts the metrics and turns the
result into the stream's last events. The stream reads one turn of output, so
between two generations it is fed the ``<|start|>assistant`` header the prompt
ended with (the usage is then the loop's, which counts what the engine did).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harmonia import Conversation, EngineError, Message, OutputEvent
from harmonia.agent import Agent, AgentLimits, AgentResult, AgentRun, RunHooks, StopReason
from harmonia.engines import Constraint, Finish, FinishReason, Generation

from ..openai_compat import ChatCompletionStream, ResponseStream
from ..vocabulary import ASSISTANT, START_ID
from ._errors import ServerShuttingDown

if TYPE_CHECKING:
    from harmonia import HarmonyEncoding
    from harmonia.engines import Engine, SamplingParams
    from harmonia.tools import Toolbox
    from harmonia.tools.browser import BrowserTool

    from ._metrics import Metrics

JsonDict = dict[str, Any]

#: The ``include`` value that asks for a web search's result pages in its ``action``.
SOURCES_INCLUDE = "web_search_call.action.sources"

_BUILTIN_COMPLETED = (
    "response.web_search_call.completed",
    "response.code_interpreter_call.completed",
)
#: Stop reasons that cut the response short (``incomplete``).
_CUT = (StopReason.LENGTH, StopReason.MAX_TOKENS, StopReason.MAX_STEPS, StopReason.MAX_SECONDS)


@dataclass(frozen=True)
class Prepared:
    """A request made ready to run: its conversation, prompt ids and constraint.

    ``strict`` and ``tool_choice`` are what the constraint was built from (a
    tool loop builds its later steps' constraint from them).
    """

    conversation: Conversation
    prompt: list[int]
    constraint: Constraint | None
    strict: bool = False
    tool_choice: str | None = None


def turn_constraint(conversation: Conversation, tool_choice: str) -> Constraint:
    """The turn grammar for ``conversation``, compiled here when llguidance is installed.

    Compiling before the engine starts makes a schema llguidance refuses the
    caller's 400 on every engine (inside an engine's worker it would be an
    engine failure), and in-process engines then copy the compiled template.
    Without llguidance (a remote engine) the grammar text goes as it is.
    """
    from ..constrained import GrammarOptions

    constraint = Constraint.from_conversation(conversation, GrammarOptions(tool_choice=tool_choice))
    try:
        matcher = constraint.new_matcher()
    except ImportError:  # harmonia[constrained] is not installed: the engine's grammar
        return constraint
    return Constraint(grammar=constraint.grammar, matcher=matcher)


def _nothing(*_: object) -> None:
    """The default of :class:`TurnRequest`'s callbacks: a turn outside a server tells no one."""


@dataclass(frozen=True)
class TurnRequest:
    """Everything one turn needs from the server, and nothing more (a turn never sees the
    :class:`~harmonia.serve.Service`: the server builds this when it admits a request).

    ``params`` are the request's, ``max_tokens`` as asked: the turn cuts it to
    what ``context_tokens`` leaves after the prompt. ``runner`` runs the turn's
    events instead of :meth:`Turn.drive` (a :class:`~harmonia.serve.ToolLoop`'s
    ``run``). The callbacks report back: the engine failed (``on_engine_failure``)
    or answered (``on_engine_success``), the turn closed (``on_close``, once, after
    its run ended: the admission slot goes back there).
    """

    engine: Engine
    encoding: HarmonyEncoding
    prepared: Prepared
    params: SamplingParams
    stream: ResponseStream | ChatCompletionStream
    context_tokens: int
    cot_policy: str
    metrics: Metrics
    runner: Callable[[Turn], AsyncIterator[list[JsonDict]]] | None = None
    on_engine_failure: Callable[[EngineError], None] = _nothing
    on_engine_success: Callable[[], None] = _nothing
    on_close: Callable[[Turn], None] = _nothing


class Turn(RunHooks):
    """One admitted turn of the model: what a :class:`~harmonia.serve.ToolLoop` is given.

    ``engine``, ``encoding``; ``conversation`` and ``prompt``, its ids as the
    engine is to see them (with ``previous_response_id``, spliced onto the ids
    the earlier response sampled, so the engine's prefix cache holds);
    ``params`` (``max_tokens`` bounds the whole turn); ``constraint``, the
    first step's; ``cot_policy`` for later steps' prompts; ``stream``, the API
    stream fed every sampled id. :meth:`drive` runs the turn (with a toolbox,
    its tool calls too); the admission slot is held until :meth:`close`.
    """

    def __init__(self, request: TurnRequest) -> None:
        prepared = request.prepared
        self.engine: Engine = request.engine
        self.encoding: HarmonyEncoding = request.encoding
        self.conversation: Conversation = prepared.conversation
        self.prompt = tuple(prepared.prompt)
        #: The request's whole-turn limits; ``max_tokens`` is cut by the one budget rule.
        self._limits = AgentLimits(
            max_steps=1,
            max_tokens=request.params.max_tokens,
            max_seconds=None,
            context_tokens=request.context_tokens,
        )
        # The server refused a prompt that leaves no room (``Service.prepare``): one token
        # at least, so that the parameters stay valid whatever a caller built.
        budget = max(1, self._limits.budget(len(self.prompt)))
        self.params = replace(request.params, max_tokens=budget)
        self.constraint: Constraint | None = prepared.constraint
        self.cot_policy = request.cot_policy
        self.stream = request.stream
        self._request = request
        self._run: AgentRun | None = None
        self._shaper: _Shaper | None = None
        self._pending: list[JsonDict] = []  # the events made since drive() last took them
        self._wake: asyncio.Future[None] | None = None  # drive() waiting for more
        self._push: Callable[[list[JsonDict]], bool] | None = None  # see push_to()
        self._over = False  # the run has ended: what is pending is the last of it
        self._waiting: float | None = None  # from the start to the first token (the TTFT)
        self._began = 0.0
        self._steps = 0
        self._tokens: tuple[int, ...] = ()
        self._last: Finish | None = None
        self._closed = False
        self._interrupted: str | None = None  # why the server ended the turn (shutting down)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The sampled ids of a one-step turn (a later request splices onto them), else none."""
        return self._tokens if self._steps == 1 else ()

    def events(self) -> AsyncIterator[list[JsonDict]]:
        """The turn's events: from the tool loop it was admitted with, else :meth:`drive`'s."""
        runner = self._request.runner
        return self.drive() if runner is None else runner(self)

    def later_constraint(self) -> Constraint | None:
        """The constraint of the steps after a tool reply (it may compile: use a worker thread).

        What is strict (function arguments, a ``json_schema`` text format) holds
        on every step; a ``tool_choice`` of ``required`` or a named tool was met
        by the first step's call, so later steps choose freely (``auto``) and
        may answer. Without ``strict`` nothing constrains them.
        """
        prepared = self._request.prepared
        if prepared.constraint is None or not prepared.strict:
            return None
        if prepared.tool_choice in (None, "auto", "none"):
            return prepared.constraint  # the same turn grammar: system and developer hold
        return turn_constraint(prepared.conversation, "auto")

    def start(
        self,
        toolbox: Toolbox | None = None,
        *,
        browser: BrowserTool | None = None,
        limits: AgentLimits | None = None,
        later: Constraint | None = None,
    ) -> None:
        """Start the run; an engine that refuses the first generation raises here."""
        if self._run is not None:
            return
        if limits is None:  # a plain request: one generation, as long as the request allows
            limits = self._limits if toolbox is None else AgentLimits()
        # max_output_tokens bounds the whole response (every step), as OpenAI's does; each
        # step's prompt, grown by the tool replies, must leave room in the context.
        limits = replace(
            limits,
            context_tokens=self._limits.context_tokens,
            max_tokens=self.params.max_tokens
            if toolbox is None
            else min(limits.max_tokens, self.params.max_tokens),
        )
        # The request's constraint for the first step, ``later`` after a tool reply.
        constraints = iter((self.constraint,))
        agent = Agent(
            self.engine,
            toolbox,
            encoding=self.encoding,
            params=self.params,
            limits=limits,
            constraint=lambda _: next(constraints, later),
            cot_policy=self.cot_policy,
        )
        request = self.stream.request if isinstance(self.stream, ResponseStream) else {}
        include = request.get("include")
        sources = isinstance(include, list) and SOURCES_INCLUDE in include
        self._shaper = None if toolbox is None else _Shaper(browser, sources=sources)
        self._waiting = time.monotonic()
        # Followed through the hooks alone: the run keeps no events of its own.
        self._run = agent.run(self.conversation, prompt=self.prompt, hooks=self, events=False)
        self._run.begin()

    async def drive(
        self,
        toolbox: Toolbox | None = None,
        *,
        browser: BrowserTool | None = None,
        limits: AgentLimits | None = None,
    ) -> AsyncIterator[list[JsonDict]]:
        """Run the turn (unless :meth:`start` did); yield the stream's events, the last at the end.

        An engine failure is raised as the engine's ``EngineError``; leaving
        early (a client gone) cancels the run, and with it the generation or tool.
        """
        if self._interrupted is not None:
            raise ServerShuttingDown(self._interrupted)
        if self._run is None:
            later = None if toolbox is None else await asyncio.to_thread(self.later_constraint)
            self.start(toolbox, browser=browser, limits=limits, later=later)
        run = self._run
        assert run is not None
        ended = asyncio.ensure_future(run.result())
        ended.add_done_callback(self._ended)
        try:
            while self._pending or not self._over:
                if not self._pending:
                    self._wake = asyncio.get_running_loop().create_future()
                    await self._wake
                    continue
                # Everything made since the last wake-up goes in one batch: one write.
                batch, self._pending = self._pending, []
                yield batch
            result = await ended
        finally:  # a client gone: the generation or tool stops before the runtimes close
            run.cancel()  # a no-op once the run is over
            await run.result()
        if self._interrupted is not None:
            raise ServerShuttingDown(self._interrupted)
        if result.stop_reason is StopReason.ERROR and isinstance(result.error, EngineError):
            self._request.on_engine_failure(result.error)
            raise result.error
        self._request.on_engine_success()
        yield self._finish(result)

    def interrupt(self, reason: str) -> None:
        """End the turn now (the server is shutting down): :meth:`drive` raises
        :class:`ServerShuttingDown`, after the events already made."""
        if self._interrupted is None:
            self._interrupted = reason
            if self._run is not None:
                self._run.cancel()

    async def close(self) -> None:
        """Cancel the run if it still runs and give the slot back (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._run is not None:
                self._run.cancel()
                await self._run.result()
        finally:
            self._request.on_close(self)

    def push_to(self, push: Callable[[list[JsonDict]], bool] | None) -> None:
        """Write events through ``push`` while :meth:`drive`'s reader waits (``None``: stop).

        ``push`` (an SSE answer's :meth:`~harmonia.serve._asgi.SSEResponse.pusher`)
        writes a batch at once, in the engine's task, or declines; a declined
        batch, or one made while earlier events are pending, is yielded by
        :meth:`drive` as before. Either way the order is the order they were made.
        """
        self._push = push

    # -- the driver's hooks ------------------------------------------------------------

    def _put(self, events: list[JsonDict]) -> None:
        if self._shaper is not None:
            events = self._shaper.shape(events)
        if not events:
            return
        wake, push = self._wake, self._push
        # Pushed only while drive() waits with nothing pending: all before is written.
        waiting = wake is not None and not wake.done() and not self._pending
        if waiting and push is not None and push(events):
            return
        self._pending += events
        self._wake_drive()

    def _ended(self, _: object) -> None:
        self._over = True
        self._wake_drive()

    def _wake_drive(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def step(self, number: int) -> None:
        self._steps, self._began = number, time.monotonic()
        if number > 1:
            header = [START_ID, *self.encoding.encode_ordinary(ASSISTANT)]
            self._put(self.stream.feed_many(header))  # no item events

    def sampled(
        self, generation: Generation, ids: Sequence[int], start: int
    ) -> Sequence[OutputEvent] | None:
        """The one place sampled ids reach the API stream (``generation.tokens[start:]``)."""
        if self._waiting is not None:  # the turn's first token
            self._request.metrics.first_token(time.monotonic() - self._waiting)
            self._waiting = None
        # Read once: what is shown is what runs. The chunk's log-probabilities are
        # read right after the engine gave it (``last_logprobs`` is that chunk's).
        out, read = self.stream.feed_read(ids, generation.last_logprobs)
        self._put(out)
        return read

    def generated(self, generation: Generation) -> None:
        # Every step counts, however it ended; here and nowhere else.
        self._request.metrics.generation(len(generation.tokens), time.monotonic() - self._began)
        self._tokens, self._last = generation.tokens, generation.finish

    def tool_finished(self, call: Message, reply: Message | None) -> None:
        if self._shaper is not None and reply is not None:
            self._pending += self._shaper.complete(reply)
            self._wake_drive()

    def _finish(self, result: AgentResult) -> list[JsonDict]:
        """The stream's last events for ``result``."""
        stopped = self._last is not None and self._last.reason is FinishReason.STOP
        out = self.stream.finish(finished=False if result.stop_reason in _CUT else stopped)
        if self._shaper is not None:
            out = self._shaper.release() + self._shaper.shape(out)
        usage = self.stream.response.get("usage") if isinstance(self.stream, ResponseStream) else 0
        if isinstance(usage, dict):
            # The loop counts what the engine did: every step's prompt and output.
            prompt, completion = result.usage.prompt_tokens, result.usage.completion_tokens
            usage.update(
                input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
            )
        return out


class _Shaper:
    """A tools turn's Responses events: built-in calls held until their tool ran, citations."""

    def __init__(self, browser: BrowserTool | None, *, sources: bool = False) -> None:
        self.browser = browser
        #: Whether a search's ``action`` lists the result pages (``include`` asked for it).
        self.sources = sources
        self._seq: int | None = None
        self._held: list[JsonDict] = []
        self._held_ids: set[str] = set()
        self._annotations: dict[str, list[JsonDict]] = {}
        self._pages = 0

    def complete(self, reply: Message) -> list[JsonDict]:
        """Put what the tool did on its held item (python's output, the page opened); release."""
        for event in self._held:
            item = event.get("item")
            if event["type"] != "response.output_item.done" or not isinstance(item, dict):
                continue
            if item.get("type") == "code_interpreter_call":
                text = "".join(getattr(part, "text", "") for part in reply.content)
                item["outputs"] = [{"type": "logs", "logs": text}]
            action = item.get("action")
            if (
                self.sources
                and item.get("type") == "web_search_call"
                and isinstance(action, dict)
                and action.get("type") == "search"
            ):
                action["sources"] = self._sources()
            if (
                item.get("type") == "web_search_call"
                and isinstance(action, dict)
                and action.get("type") in ("open_page", "find_in_page")
                and self.browser is not None
                and len(self.browser.state) > self._pages
            ):
                url = self.browser.state.page().url
                if url:  # a page the call opened (a search-results page has none)
                    action["url"] = url
        return self.release()

    def _sources(self) -> list[JsonDict]:
        """The result pages of the search that just ran (its results page's links)."""
        if self.browser is None or len(self.browser.state) <= self._pages:
            return []
        page = self.browser.state.page()
        if page.kind != "search":
            return []
        return [{"type": "url", "url": url} for url in page.links.values()]

    def release(self) -> list[JsonDict]:
        held, self._held = self._held, []
        self._held_ids.clear()
        return self._number(held)

    def _number(self, events: list[JsonDict]) -> list[JsonDict]:
        for event in events:
            if self._seq is None:
                self._seq = int(event["sequence_number"])
            event["sequence_number"] = self._seq
            self._seq += 1
        return events

    def shape(self, events: list[JsonDict]) -> list[JsonDict]:
        """Hold a built-in call's end until its tool ran; add the answer's citations."""
        out: list[JsonDict] = []
        for event in events:
            kind = event["type"]
            if kind in _BUILTIN_COMPLETED:  # parsed: its tool runs next
                self._pages = 0 if self.browser is None else len(self.browser.state)
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
                "sequence_number": 0,  # numbered by shape
                "item_id": event["item_id"],
                "output_index": event["output_index"],
                "content_index": event["content_index"],
                "annotation_index": index,
                "annotation": annotation,
            }
            for index, annotation in enumerate(annotations)
        ]
