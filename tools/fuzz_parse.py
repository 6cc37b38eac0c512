"""Fuzzing the parser over random and mutated renderings (a developer tool).

    python tools/fuzz_parse.py [N] [--seed S] [--processes P]

Checks, for each of N token sequences (with and without a role given):

* strict mode raises nothing but ``HarmonyError`` subclasses;
* lenient mode never raises, and loses no text: every word of the decoded input
  (split at whitespace, special tokens and U+FFFD) is found in a message (its
  text or a header field) or in a diagnostic's ``kept`` or ``dropped`` text (a
  role and channel run together, ``assistantanalysis``, is recovered as both and
  the diagnostic keeps the word as written);
* batch parsing, streaming with :meth:`~harmonia.StreamableParser.process` (the
  properties read after every token) and the event API
  (:meth:`~harmonia.StreamableParser.feed`) agree: the same messages, the same
  diagnostics, the same error; each message's deltas join to its text;
* batch parsing's fast path (:mod:`harmonia._parse.fastpath`) changes nothing:
  ``parse_completion`` gives exactly what a plain loop over the streaming parser
  gives (messages, diagnostics, or the error's type, text, state, token, token
  text and index), strict and lenient, with ``complete`` false and true; and
  whatever the fast path accepts, the streaming parser reads without an error
  or a diagnostic, to the same messages.

The sequences are renderings of random messages (harmonia's renderer), mutated
(tokens deleted, inserted, duplicated, swapped, cut off, a ``<|channel|>`` lost so
that the role and channel run together), or random tokens.
``tests/parse/test_parse_fuzz.py`` runs :func:`check` under hypothesis; this
script runs it at scale and reports throughput. Exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import harmonia as h
from harmonia import (
    ContentDelta,
    Diagnostic,
    HarmonyError,
    MessageDone,
    MessageStarted,
    ParseError,
    Role,
    vocabulary,
)
from harmonia._parse.fastpath import read_clean

START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL = (
    vocabulary.START_ID,
    vocabulary.END_ID,
    vocabulary.MESSAGE_ID,
    vocabulary.CHANNEL_ID,
    vocabulary.CONSTRAIN_ID,
    vocabulary.RETURN_ID,
    vocabulary.CALL_ID,
)
FORMAT = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL)
FIRST_SPECIAL = vocabulary.FIRST_SPECIAL_ID
ODD_TOKENS = (
    *FORMAT,
    199999,  # <|endoftext|>
    200013,  # a reserved special token
    201088,  # the last id
    201089,  # the first unknown id
    2**32 - 1,
    -1,
    9552,  # " " + two bytes of a four-byte character
    31446,  # three bytes of "💖"
    244,  # its last byte
    28823,  # bytes that are not UTF-8 on their own
    173781,  # "assistant"
    35644,  # "analysis"
    17196,  # "final"
    12606,  # "commentary"
)
TEXTS = [
    "Hello",
    " world",
    "é",
    "💖",
    "日本語",
    " ",
    "\n",
    "\t",
    "a<|start|>b",
    '{"a": 1}',
    "x y z",
]
WORDS = ["analysis", "commentary", "final", "assistant", "user", "functions.f", "to=python"]
WORDS += ["json", "<|constrain|>json", "to=functions.get_weather", "assistantfinal", "\xa0", "x"]
# A role and a channel run together (gpt-oss output that lost its <|channel|>).
WORDS += ["assistantanalysis", "assistantcommentary", "userfinal"]


# -- the checks ------------------------------------------------------------------------


# Header text is read as a string, so the spelling of a special token is a
# marker there too, and a channel value ends at "<": words break there as well.
_WORD_BREAK: Final = re.compile(r"[\s\ufffd]+|<\|[A-Za-z0-9_]+\|>|(?=<)")


def input_words(table: list[bytes], tokens: list[int]) -> list[str]:
    """The words of the decoded input: split at whitespace, special tokens and U+FFFD.

    Also at the spelling of a special token, and before "<" (see _WORD_BREAK).
    """
    runs: list[str] = []
    run: list[bytes] = []
    for t in tokens:
        if 0 <= t < FIRST_SPECIAL:
            run.append(table[t])
        else:  # a special token or an unknown id separates words
            runs.append(b"".join(run).decode("utf-8", "replace"))
            run = []
    runs.append(b"".join(run).decode("utf-8", "replace"))
    return [w for r in runs for w in _WORD_BREAK.split(r) if w]


def haystack(messages: list[h.Message], diagnostics: tuple[Diagnostic, ...]) -> str:
    """Everything lenient mode kept, with the ways a header's words are joined."""
    parts: list[str] = []
    for m in messages:
        role = m.author.role.value
        parts += [role, m.text, m.author.name or "", m.channel or "", m.content_type or ""]
        if m.author.name is not None:
            parts.append(f"{role}:{m.author.name}")  # user:Bob
        if m.recipient is not None:
            parts.append(f"to={m.recipient}")
    for d in diagnostics:
        parts += [d.kept or "", d.dropped or ""]
    return "\n".join(parts)


def _stream(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, strict: bool, events: bool
) -> tuple[list[h.Message] | str, tuple[Diagnostic, ...], list[str]]:
    """Stream the tokens; (messages or error text, diagnostics, problems seen on the way)."""
    p = h.StreamableParser(enc, role, strict=strict)
    problems: list[str] = []
    seen: list[Diagnostic] = []
    done: list[h.Message] = []
    pieces: list[str] = []

    def consume(batch: list[h.ParserEvent]) -> None:
        nonlocal pieces
        for event in batch:
            if isinstance(event, MessageStarted):
                pieces = []
            elif isinstance(event, ContentDelta):
                pieces.append(event.text)
            elif isinstance(event, MessageDone):
                done.append(event.message)
                if "".join(pieces) != event.message.text:
                    problems.append(f"deltas {pieces!r} do not join to {event.message.text!r}")
                pieces = []
            else:
                seen.append(event)

    try:
        for i, t in enumerate(tokens):
            if events:
                consume(p.feed(t))
            else:
                p.process(t)
                _ = (p.current_content, p.current_role, p.last_content_delta, p.diagnostics)
                if i % 16 == 0:  # state_data encodes the text again: not after every token
                    _ = p.state_data
        if events:
            consume(p.feed_eos())
        else:
            p.process_eos()
    except HarmonyError as exc:
        return f"{type(exc).__name__}: {exc}", p.diagnostics, problems
    if events:
        if done != p.messages:
            problems.append("MessageDone events differ from parser.messages")
        if tuple(seen) != p.diagnostics:
            problems.append("Diagnostic events differ from parser.diagnostics")
    return p.messages, p.diagnostics, problems


Outcome = tuple[list[h.Message], tuple[Diagnostic, ...]] | str


def _error(exc: HarmonyError) -> str:
    """Everything an error says: its type and text, and a ParseError's fields."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ParseError):
        text += f" [{exc.state} {exc.token} {exc.token_text!r} {exc.token_index}]"
    return text


def _loop(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, strict: bool, complete: bool
) -> Outcome:
    """What the streaming parser alone makes of the tokens (what batch parsing must give)."""
    p = h.StreamableParser(enc, role, strict=strict)
    try:
        for t in tokens:
            p.process(t)
        p.process_eos(complete=complete)
    except HarmonyError as exc:
        return _error(exc)
    return p.messages, p.diagnostics


def check_fast_path(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None
) -> tuple[list[str], int]:
    """The fast-path property above; (problems, how many of the 4 modes it accepted)."""
    problems: list[str] = []
    taken = 0
    table = enc.tokenizer.token_bytes_table
    for strict in (True, False):
        for complete in (False, True):
            mode = f"{'strict' if strict else 'lenient'} complete={complete}"
            expected = _loop(enc, tokens, role, strict, complete)
            try:
                result = h.parse_completion(enc, tokens, role, strict=strict, complete=complete)
                got: Outcome = (result.messages, result.diagnostics)
            except HarmonyError as exc:
                got = _error(exc)
            if got != expected:
                problems.append(f"{mode}: parse_completion gives {got!r}, the loop {expected!r}")
            clean = read_clean(table, list(tokens), role, strict=strict, complete=complete)
            if clean is None:
                continue
            taken += 1
            messages = [
                h.Message(
                    h.Author(hd.role, hd.name),
                    [h.TextContent(text)],
                    hd.channel,
                    hd.recipient,
                    hd.content_type,
                )
                for hd, text in clean
            ]
            if expected != (messages, ()):
                problems.append(f"{mode}: the fast path gives {messages!r}, the loop {expected!r}")
    return problems, taken


def check(
    enc: h.HarmonyEncoding, tokens: list[int], role: Role | None, stats: Counter[str] | None = None
) -> list[str]:
    """Every property above for one input; the problems found (none: all hold).

    ``stats`` counts the parses tried (``parses``) and those the fast path took (``fast``).
    """
    problems, taken = check_fast_path(enc, tokens, role)
    if stats is not None:
        stats["parses"] += 4
        stats["fast"] += taken
    for strict in (True, False):
        mode = "strict" if strict else "lenient"
        try:
            try:
                result = h.parse_completion(enc, tokens, role, strict=strict)
                batch: list[h.Message] | str = result.messages
                diagnostics = result.diagnostics
            except HarmonyError as exc:
                batch, diagnostics = f"{type(exc).__name__}: {exc}", ()
            streamed = _stream(enc, tokens, role, strict, events=False)
            evented = _stream(enc, tokens, role, strict, events=True)
        except Exception as exc:  # anything but a HarmonyError is a bug
            problems.append(f"{mode}: raised {type(exc).__name__}: {exc}")
            continue
        if not strict and isinstance(batch, str):
            problems.append(f"lenient raised {batch}")
            continue
        for how, (messages, diags, seen) in (("process", streamed), ("feed", evented)):
            problems += [f"{mode} {how}: {p}" for p in seen]
            if messages != batch:
                problems.append(f"{mode}: batch and {how} differ: {batch!r} != {messages!r}")
            elif not isinstance(batch, str) and diags != diagnostics:
                problems.append(f"{mode}: batch and {how} diagnostics differ")
        if not strict and not isinstance(batch, str):
            kept = haystack(batch, diagnostics)
            lost = [
                w for w in input_words(enc.tokenizer.token_bytes_table, tokens) if w not in kept
            ]
            if lost:
                problems.append(f"lenient lost {lost!r}")
    return problems


# -- the inputs --------------------------------------------------------------------------


def random_message(rng: random.Random) -> h.Message:
    role = rng.choice([Role.ASSISTANT, Role.ASSISTANT, Role.USER, Role.TOOL, Role.DEVELOPER])
    text = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 6)))
    if role is Role.TOOL:
        name = rng.choice(["functions.get_weather", "browser.search", "python", "a.b-c"])
        m = h.Message.from_author_and_content(h.Author.new(role, name), text)
    else:
        m = h.Message.from_role_and_content(role, text)
    channel = rng.choice([None, "analysis", "commentary", "final", "weird"])
    if channel:
        m = m.with_channel(channel)
    recipient = rng.choice([None, None, "functions.get_weather", "python", "assistant"])
    if recipient:
        m = m.with_recipient(recipient)
    content_type = rng.choice([None, None, "<|constrain|>json", "<|constrain|> json", "code"])
    if content_type and (recipient or content_type.startswith("<|")):
        m = m.with_content_type(content_type)
    return m


class Inputs:
    """Random token sequences: renderings, mutated renderings, and noise."""

    def __init__(self, enc: h.HarmonyEncoding, seed: int) -> None:
        self.rng = random.Random(seed)
        pool_rng = random.Random(seed ^ 0x5EED)
        self.pool = [enc.render(random_message(pool_rng)) for _ in range(300)]
        self.words = [enc.encode(w, allowed_special="all") for w in WORDS]

    def __iter__(self) -> Iterator[tuple[list[int], Role | None]]:
        return self

    def __next__(self) -> tuple[list[int], Role | None]:
        rng = self.rng
        kind = rng.random()
        if kind < 0.1:
            tokens = [self._token() for _ in range(rng.randint(0, 30))]
            return tokens, rng.choice([None, Role.ASSISTANT])
        tokens = [t for _ in range(rng.randint(1, 4)) for t in rng.choice(self.pool)]
        role: Role | None = None
        if rng.random() < 0.5 and tokens[:2] == [START, 173781]:
            tokens, role = tokens[2:], Role.ASSISTANT  # the prompt ended with <|start|>assistant
        if kind < 0.85:
            for _ in range(rng.randint(1, 4)):
                tokens = self._mutate(tokens)
        return tokens, role

    def _token(self) -> int:
        r = self.rng.random()
        if r < 0.5:
            return self.rng.choice(ODD_TOKENS)
        return self.rng.randrange(0, 201089)

    def _mutate(self, tokens: list[int]) -> list[int]:
        rng = self.rng
        i = rng.randrange(len(tokens) + 1)
        op = rng.randrange(7)
        if op == 6:  # the glued shape: a <|channel|> lost, as in <|start|>assistantanalysis
            marks = [k for k, t in enumerate(tokens) if t == CHANNEL]
            if marks:
                k = rng.choice(marks)
                return tokens[:k] + tokens[k + 1 :]
        if op == 0 and tokens:
            return tokens[: min(i, len(tokens) - 1)] + tokens[min(i, len(tokens) - 1) + 1 :]
        if op == 1:
            return [*tokens[:i], self._token(), *tokens[i:]]
        if op == 2:
            return [*tokens[:i], *rng.choice(self.words), *tokens[i:]]
        if op == 3 and i < len(tokens):
            return [*tokens[: i + 1], *tokens[i:]]  # duplicate one
        if op == 4 and i + 1 < len(tokens):
            return [*tokens[:i], tokens[i + 1], tokens[i], *tokens[i + 2 :]]
        return tokens[:i]  # cut off


# -- running --------------------------------------------------------------------------


Failure = tuple[list[int], Role | None, list[str]]


def _work(job: tuple[int, int]) -> tuple[int, list[Failure], Counter[str]]:
    seed, n = job
    enc = _encoding()
    failures = []
    stats: Counter[str] = Counter()
    inputs = Inputs(enc, seed)
    for _ in range(n):
        tokens, role = next(inputs)
        problems = check(enc, tokens, role, stats)
        if problems:
            failures.append((tokens, role, problems))
    return n, failures, stats


_ENC: h.HarmonyEncoding | None = None


def _encoding() -> h.HarmonyEncoding:
    global _ENC
    if _ENC is None:
        _ENC = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    return _ENC


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("n", nargs="?", type=int, default=1_000_000, help="sequences to check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=2000, help="sequences per job")
    args = parser.parse_args(argv)
    jobs = [
        (args.seed * 1_000_003 + i, min(args.chunk, args.n - start))
        for i, start in enumerate(range(0, args.n, args.chunk))
    ]
    done = 0
    failures: list[Any] = []
    stats: Counter[str] = Counter()
    began = time.perf_counter()
    with multiprocessing.Pool(args.processes) as pool:
        for n, found, counts in pool.imap_unordered(_work, jobs):
            done += n
            failures += found
            stats += counts
            elapsed = time.perf_counter() - began
            print(
                f"\r{done:,}/{args.n:,} checked, {len(failures)} failing, {done / elapsed:,.0f}/s",
                end="",
                file=sys.stderr,
                flush=True,
            )
    elapsed = time.perf_counter() - began
    print(file=sys.stderr)
    print(
        f"{done:,} sequences ({2 * done:,} parses per mode) in {elapsed:.1f} s "
        f"({done / elapsed:,.0f}/s on {args.processes} processes): {len(failures)} failing"
    )
    if stats["parses"]:
        print(
            f"batch parsing's fast path took {stats['fast']:,} of {stats['parses']:,} batch "
            f"parses ({stats['fast'] / stats['parses']:.0%}); the streaming parser, the rest"
        )
    for tokens, role, problems in failures[:20]:
        print(f"role={role} tokens={tokens}")
        for problem in problems:
            print(f"    {problem}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
