"""The default BPE engine: pure Python first, quicktok once it pays for itself.

Building quicktok costs about half a second of CPU, once; after that it encodes
text five to ten times faster than the pure-Python encoder. Whether the build is
worth it depends on how much text the process will encode, which is unknown in
advance, so the choice follows the ski-rental rule: keep "renting" (encoding in
Python) until the time spent doing so is about what "buying" (the build) costs,
then buy. No process pays much more than twice the better choice in hindsight:
a script that renders a few prompts never builds quicktok, and a server that
renders many switches after some megabytes of text.

Both encoders are exact, so the switch never changes a single token id (the
test suite checks the two agree); only the speed changes. If quicktok cannot be
built, the engine keeps encoding in Python and says why in :attr:`status`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter
from typing import Protocol

#: Seconds spent encoding in Python before switching: about what building quicktok
#: costs on the machines we measured (a clock, not a character count, so that the
#: rule holds for any mix of ASCII and other text and on any machine's speed).
DEFAULT_SWITCH_AFTER_SECONDS = 0.5

#: A low estimate of what the Python encoder spends per character of ordinary
#: text (1 to 1.5 microseconds measured): a text that could use up the rest of the
#: budget by itself is encoded in timed parts (see TieredEngine._encode_big), so one
#: huge request never runs entirely in Python unless Python is cheap on it.
PYTHON_SECONDS_PER_CHAR = 1e-6


#: A text that could use up the rest of the budget alone is encoded in Python in
#: parts of about this many characters, the first costing a few milliseconds,
#: while the parts so far say the rest fits in the budget (runs of one character
#: and common words are cheap in Python; random text and CJK are not).
BIG_TEXT_PART_CHARS = 16_384


class BpeEngine(Protocol):
    """What harmonia needs from a BPE engine: ordinary text to ranks, ranks to bytes."""

    name: str

    def encode_ordinary(self, text: str) -> list[int]: ...

    def token_bytes(self, rank: int) -> bytes: ...


class TieredEngine:
    """Encodes with ``python`` for ``switch_after_seconds`` in all, then with ``build_fast()``."""

    name = "auto"

    def __init__(
        self,
        python: BpeEngine,
        build_fast: Callable[[], BpeEngine],
        switch_after_seconds: float = DEFAULT_SWITCH_AFTER_SECONDS,
        clock: Callable[[], float] = perf_counter,
    ) -> None:
        self._python: BpeEngine | None = python  # dropped after the switch, to free its tables
        self._build_fast = build_fast
        self._fast: Callable[[str], list[int]] | None = None
        # Updated without a lock: a lost update between threads only moves the
        # switch by one call's worth of time, which does not matter for a heuristic.
        self._seconds_left = switch_after_seconds
        #: Seconds now (``perf_counter``; a test passes a clock that counts work).
        self._clock = clock
        self._lock = threading.Lock()
        self._failure: str | None = None
        self.token_bytes = python.token_bytes
        #: The encoder to call: this object's tiering until the switch, then the fast
        #: engine's own function, so that callers which look it up on each call (the
        #: renderer does) skip the tiering once it has nothing left to decide.
        self.encode_ordinary: Callable[[str], list[int]] = self._encode_tiered

    @property
    def status(self) -> str:
        """Which encoder is in use, e.g. ``"python"`` or ``"quicktok"``."""
        if self._fast is not None:
            return "quicktok"
        if self._failure is not None:
            return f"python (quicktok unavailable: {self._failure})"
        return "python"

    def _encode_tiered(self, text: str) -> list[int]:
        # Read the Python encoder before the fast one: switch() publishes the fast
        # encoder first and drops the Python one after, so one of the two is set.
        python = self._python
        fast = self._fast
        if fast is not None:
            return fast(text)
        assert python is not None
        if len(text) * PYTHON_SECONDS_PER_CHAR > self._seconds_left and self._failure is None:
            return self._encode_big(python, text)
        start = self._clock()
        ids = python.encode_ordinary(text)
        self._seconds_left -= self._clock() - start
        if self._seconds_left < 0 and self._failure is None:
            self.switch()
        return ids

    def _encode_big(self, python: BpeEngine, text: str) -> list[int]:
        """Encode a big text in Python while it is cheap there, the rest with quicktok.

        Measuring beats guessing: after each part, the time it took predicts the
        rest; once the prediction exceeds the budget, quicktok is built and takes
        the rest of the text from the next piece boundary (exact: see
        :meth:`PythonBpe.encode_pieces`). A megabyte of spaces stays in Python
        (milliseconds); a megabyte of random text switches after its first part.
        """
        split = getattr(python, "split", None)
        encode_pieces = getattr(python, "encode_pieces", None)
        if split is None or encode_pieces is None:  # another engine: no parts to measure
            return self.switch()(text)
        pieces: list[str] = split(text)
        ids: list[int] = []
        done = index = 0
        while index < len(pieces):
            part_start, size = index, 0
            while index < len(pieces) and size < BIG_TEXT_PART_CHARS:
                size += len(pieces[index])
                index += 1
            start = self._clock()
            ids += encode_pieces(pieces[part_start:index])
            spent = self._clock() - start
            self._seconds_left -= spent
            done += size
            if self._fast is not None:  # a long piece made the switch meanwhile
                return ids + self._fast(text[done:]) if done < len(text) else ids
            rest = len(text) - done
            if rest and spent / size * rest > self._seconds_left and self._failure is None:
                fast = self.switch()
                if self._fast is not None:
                    return ids + fast(text[done:])
        if self._seconds_left < 0 and self._failure is None:
            self.switch()
        return ids

    def encode_long_piece(self, piece: str) -> list[int] | None:
        """Encode one piece too long for Python's merge with quicktok, building it now.

        The Python encoder calls this for long pieces that it cannot tile: merging
        one costs about ten microseconds a byte, so a 100 KB word alone would cost
        more than the build. Returns None (merge in Python) if quicktok is unavailable.
        """
        self.switch()
        fast = self._fast
        return None if fast is None else fast(piece)

    def switch(self) -> Callable[[str], list[int]]:
        """Build the fast encoder now (if not yet built) and use it from now on."""
        with self._lock:
            python = self._python
            if self._fast is None and self._failure is None:
                try:
                    fast = self._build_fast()
                except Exception as exc:  # keep encoding in Python: never fail a render
                    self._failure = str(exc) or type(exc).__name__
                else:
                    self._fast = fast.encode_ordinary
                    self.token_bytes = fast.token_bytes
                    self.encode_ordinary = self._fast
                    self._python = None  # its rank table and piece cache can go
        if self._fast is not None:
            return self._fast
        assert python is not None
        return python.encode_ordinary
