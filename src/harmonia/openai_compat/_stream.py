"""The driver both streaming adapters share: tokens in, API objects out.

The :class:`OutputAssembler` turns tokens into output-item events; a subclass
says how an event becomes Chat chunks or Responses events, what to send first
and what to send at the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, TypeVar

from .._encoding import HarmonyEncoding
from .._errors import InputError
from .._tokenizer import special_tokens as st
from .._turn import OutputAssembler, OutputDiagnostic, OutputEvent, OutputItem, TurnSummary
from ._common import JsonDict
from ._logprobs import LogprobLike, logprob_json

_S = TypeVar("_S", bound="AssembledStream")


def read_tokens(
    encoding: HarmonyEncoding,
    tokens: Iterable[int],
    finished: bool | None,
    diagnostics: list[OutputDiagnostic] | None,
) -> OutputAssembler:
    """A whole output read at once (the batch converters' path without logprobs);
    what the model got wrong is added to ``diagnostics`` when given."""
    assembler = OutputAssembler(encoding)
    for token in tokens:
        assembler.feed(token)
    assembler.finish(finished=finished)
    if diagnostics is not None:
        diagnostics += assembler.diagnostics
    return assembler


def replay(
    stream: _S,
    tokens: Iterable[int],
    logprobs: Sequence[LogprobLike],
    diagnostics: list[OutputDiagnostic] | None,
    **finish: Any,
) -> _S:
    """A whole output fed through ``stream`` (the batch converters' path with logprobs:
    the stream keeps each log-probability with the text it belongs to)."""
    stream.feed_many(tokens, logprobs)
    stream.finish(**finish)
    if diagnostics is not None:
        diagnostics += stream.diagnostics
    return stream


class AssembledStream(ABC):
    """Feed sampled tokens, get the API objects to send.

    With ``logprobs=True`` every token is fed with its log-probability (the
    engine's, parallel to the ids) and the visible text's ones are sent with
    the text; a text token fed without one is an error, never a silent gap.
    """

    def __init__(self, encoding: HarmonyEncoding, *, logprobs: bool = False) -> None:
        self._encoding = encoding
        self._assembler = OutputAssembler(encoding)
        self._result: JsonDict | None = None
        self._logprobs = logprobs
        self._pending: dict[int, list[JsonDict]] = {}  # not yet sent, by item index
        self._item_logprobs: dict[int, list[JsonDict]] = {}  # every one, by item index
        # Runs of ordinary tokens read outside content (split at special tokens), since
        # the last content token: the parser may yet recover them as text (a header
        # without <|message|>), in order.
        self._runs: list[list[JsonDict | None]] = []
        self._run_open = False
        self._started = False  # the opening was sent (a subclass's _opening sets it)

    @property
    def logprobs(self) -> bool:
        """Whether log-probabilities are reported."""
        return self._logprobs

    @property
    def diagnostics(self) -> list[OutputDiagnostic]:
        """What the model got wrong so far, and how it was handled."""
        return self._assembler.diagnostics

    def feed(self, token: int, logprob: LogprobLike | None = None) -> list[JsonDict]:
        """One sampled token (and its log-probability) -> the objects to send."""
        out = self._opening()
        self._note_logprob(token, logprob)
        for event in self._assembler.feed(token):
            out += self._translate(event)
        return out

    def feed_many(
        self, tokens: Iterable[int], logprobs: Sequence[LogprobLike] | None = None
    ) -> list[JsonDict]:
        """Several tokens; ``logprobs``, when given, parallel to them."""
        out: list[JsonDict] = []
        for token, logprob in self._paired(tokens, logprobs):
            out += self.feed(token, logprob)
        return out

    def feed_read(
        self, tokens: Iterable[int], logprobs: Sequence[LogprobLike] | None = None
    ) -> tuple[list[JsonDict], list[OutputEvent]]:
        """Like :meth:`feed_many`, with the item events the objects were made from.

        A caller that acts on the output (an agent loop running its tool calls)
        follows these events instead of reading the ids a second time, so what
        it runs is what the client was sent.
        """
        out: list[JsonDict] = []
        events: list[OutputEvent] = []
        # Called once per streamed token by a server: no call that would do nothing.
        pairs = zip(tokens, repeat(None)) if logprobs is None else self._paired(tokens, logprobs)
        feed, translate, noting = self._assembler.feed, self._translate, self._logprobs
        for token, logprob in pairs:
            if not self._started:
                out += self._opening()
            if noting:
                self._note_logprob(token, logprob)
            for event in feed(token):
                events.append(event)
                out += translate(event)
        return out, events

    # -- log-probabilities ----------------------------------------------------------------

    @staticmethod
    def _paired(
        tokens: Iterable[int], logprobs: Sequence[LogprobLike] | None
    ) -> list[tuple[int, LogprobLike | None]]:
        ids = list(tokens)
        if logprobs is None:
            return [(token, None) for token in ids]
        if len(logprobs) != len(ids):
            raise InputError(
                f"{len(ids)} tokens came with {len(logprobs)} log-probabilities: they must "
                "be parallel"
            )
        return list(zip(ids, logprobs, strict=True))

    def _note_logprob(self, token: int, logprob: LogprobLike | None) -> None:
        """Keep ``token``'s log-probability when it is visible text (read before feeding)."""
        if not self._logprobs:
            return
        item = self._assembler.content_item
        if st.is_special_token(token):
            self._run_open = False
            return
        if item is None:
            if not self._run_open:
                self._runs.append([])
                self._run_open = True
            entry = None if logprob is None else logprob_json(self._encoding, logprob)
            self._runs[-1].append(entry)
            return
        self._runs, self._run_open = [], False
        if item.kind != "text":
            return  # reasoning, call arguments: not reported
        if logprob is None or logprob.token != token:
            got = "none" if logprob is None else f"that of id {logprob.token}"
            raise InputError(
                f"text token {token} came with {got} as its log-probability; the stream "
                "reports them and must have each token's own"
            )
        entry = logprob_json(self._encoding, logprob)
        self._pending.setdefault(item.index, []).append(entry)
        self._item_logprobs.setdefault(item.index, []).append(entry)

    def _take_logprobs(self, item: OutputItem, text: str = "") -> list[JsonDict]:
        """The log-probabilities of ``item`` not sent yet (they go with its next delta).

        Text with none of its own is text the parser recovered from tokens read
        as a header: the first run of such tokens whose bytes end with exactly
        ``text``'s gives its log-probabilities (that run and the ones before it
        are used up); without one, none are given, never wrong ones.
        """
        taken = self._pending.pop(item.index, [])
        if taken or not text or not self._runs or item.kind != "text":
            return taken
        want = text.encode()
        for position, run in enumerate(self._runs):
            found = _suffix(run, want)
            if found is not None:
                del self._runs[: position + 1]
                self._run_open = self._run_open and bool(self._runs)
                self._item_logprobs.setdefault(item.index, []).extend(found)
                return found
        return []

    def item_logprobs(self, item: OutputItem) -> list[JsonDict]:
        """Every log-probability of ``item``'s text so far (empty when not reported)."""
        return list(self._item_logprobs.get(item.index, ()))

    def finish(self, *, finished: bool | None = None) -> list[JsonDict]:
        """End of generation: the last objects to send.

        ``finished``: ``None`` reads from the tokens whether the output was cut
        off (no stop token at the end), ``True`` says the engine stopped
        normally (it left the stop token out), ``False`` that it hit a limit.
        """
        if self._result is not None:
            return []
        out = self._opening()
        for event in self._assembler.finish(finished=finished):
            out += self._translate(event)
        return out + self._closing(self._assembler.summary)

    @abstractmethod
    def _opening(self) -> list[JsonDict]:
        """What is sent before anything else (once; later calls return nothing)."""

    @abstractmethod
    def _translate(self, event: OutputEvent) -> list[JsonDict]:
        """The objects one assembler event becomes."""

    @abstractmethod
    def _closing(self, summary: TurnSummary) -> list[JsonDict]:
        """The last objects; must set ``self._result``."""


def _suffix(run: list[JsonDict | None], want: bytes) -> list[JsonDict] | None:
    """The last entries of ``run`` whose bytes are exactly ``want`` (``None``: there are none)."""
    got = b""
    for start in range(len(run) - 1, -1, -1):
        entry = run[start]
        if entry is None:
            return None
        got = bytes(entry["bytes"]) + got
        if len(got) >= len(want):
            return [e for e in run[start:] if e is not None] if got == want else None
    return None
