"""Token inputs for ``parse`` and ``inspect``: id files read as they are used, text,
the role a completion starts in, and progress reports for long inputs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Final, TextIO

from .._encoding import HarmonyEncoding
from .._enums import Role
from .._errors import InputError
from .._files import cannot_read, describe, not_utf8
from .._tokenizer.special_tokens import MESSAGE, START
from .io import read_input

#: How far ``--role auto`` looks for the first <|start|> or <|message|>.
_HEADER_SCAN: Final = 4096

_INT_LIST = re.compile(r"^[\s\[\],0-9-]*$")
_ID: Final = re.compile(r"-?[0-9]+")


_CHUNK: Final = 1 << 16  # characters read at a time from a token file
_SEPARATORS: Final = re.compile(r"[\s,\[\]]+")


class TokenFile:
    """The ids of a token-id file, read a chunk at a time (``open`` decides if it is one).

    ``size`` is the file's size in bytes (``None`` for a pipe) and ``consumed``
    how many characters have been read so far, for progress reports.
    """

    def __init__(self, path: str, f: TextIO, first: str, size: int | None) -> None:
        self.path, self._f, self._first = path, f, first
        self.size, self.consumed = size, 0

    @classmethod
    def open(cls, path: str) -> tuple[TokenFile | None, str]:
        """A reader if the file starts with token ids, else ``None`` and the whole text."""
        try:
            f = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
            first = f.read(_CHUNK)
        except UnicodeDecodeError as exc:
            raise InputError(not_utf8(path, exc)) from None
        except OSError as exc:
            raise cannot_read(path, exc) from None
        if _looks_like_ids(first):
            return cls(path, f, first, _size(f)), ""
        try:
            with f if f is not sys.stdin else contextlib.nullcontext():
                return None, first + f.read()
        except UnicodeDecodeError as exc:
            raise InputError(not_utf8(path, exc)) from None

    def estimate(self) -> int | None:
        """About how many ids the file holds (from the first chunk's density)."""
        ids = len(_SEPARATORS.split(self._first.strip()))
        return None if self.size is None else self.size * ids // max(len(self._first), 1)

    def __iter__(self) -> Iterator[int]:
        chunk, tail = self._first, ""
        # A JSON list must end with its ']': without it the file was cut short,
        # and its last id may be cut too ("173" of "1734").
        bracketed, last = self._first.lstrip().startswith("["), ""
        with self._f if self._f is not sys.stdin else contextlib.nullcontext():
            while chunk:
                last = chunk.rstrip()[-1:] or last
                if not _INT_LIST.match(chunk):
                    raise InputError(
                        f"{describe(self.path)} is not a list of token ids after character "
                        f"{self.consumed}; give --text to read it as text"
                    )
                pieces = _SEPARATORS.split(tail + chunk)
                tail = pieces.pop()  # the chunk may end inside a number
                yield from (self._int(p) for p in pieces if p)
                self.consumed += len(chunk)
                try:
                    chunk = self._f.read(_CHUNK)
                except UnicodeDecodeError as exc:
                    raise InputError(not_utf8(self.path, exc)) from None
        if bracketed and last != "]":
            raise InputError(
                f"{describe(self.path)} starts a JSON list of token ids with '[' but has no "
                "closing ']': it was cut short; give the whole list"
            )
        if tail:
            yield self._int(tail)

    def _int(self, piece: str) -> int:
        try:
            return int(piece)
        except ValueError:
            raise InputError(f"{describe(self.path)}: {piece!r} is not a token id") from None


def _size(f: TextIO) -> int | None:
    """The size of a regular file, ``None`` for a pipe or an in-memory stream."""
    try:
        return os.fstat(f.fileno()).st_size if f.seekable() else None
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None


def _looks_like_ids(first: str) -> bool:
    """Whether a file's first chunk is ids (a cut number at its end is checked later)."""
    if not first.strip() or not _INT_LIST.match(first):
        return False
    pieces = [p for p in _SEPARATORS.split(first) if p]
    if len(first) == _CHUNK:  # the chunk may end inside a number
        pieces.pop()
    return all(_ID.fullmatch(piece) for piece in pieces)  # "2024-06-01" is text


def read_tokens(
    path: str,
    enc: HarmonyEncoding,
    *,
    text: bool = False,
    ids: bool = False,
    strict: bool = False,
) -> tuple[Iterable[int], int | None]:
    """Token ids (a JSON list or ids separated by spaces), or text with special tokens.

    Also about how many there are (``None`` when unknown). Id files are read as
    they are consumed, so a large file never sits in memory whole. ``text``: the
    input is text even if it looks like ids; ``ids``: it must be ids; ``strict``:
    an id outside the vocabulary is refused (naming it and its index) when read.
    """
    if text:
        content = read_input(path)
    else:
        source, content = TokenFile.open(path)
        if source is not None:
            vocabulary = len(enc.tokenizer.token_bytes_table)
            ids_in = _in_range(source, path, vocabulary) if strict else source
            return ids_in, source.estimate()
        if ids:
            raise InputError(
                f"{describe(path)} is not a list of token ids "
                "(a JSON list, or ids separated by spaces or commas); drop --ids to read text"
            )
        _refuse_conversation_json(path, content)
    # The newline an editor (or echo) puts at the end of a file is not model output:
    # after a stop token it would be one more token, which strict parsing refuses.
    tokens = enc.encode(_without_final_newline(content), allowed_special="all")
    return tokens, len(tokens)


def _in_range(ids: Iterable[int], path: str, vocabulary: int) -> Iterator[int]:
    """``ids``, refusing the first that is not a token id, by its value and index."""
    for index, token in enumerate(ids):
        if not 0 <= token < vocabulary:
            raise InputError(
                f"{describe(path)}: token id {token} at token index {index} is out of range "
                f"(o200k_harmony ids are 0..{vocabulary - 1}); --lenient reads past it "
                "with a diagnostic"
            )
        yield token


def _refuse_conversation_json(path: str, content: str) -> None:
    """A conversation (harmony JSON or a Chat request) is not model output: say what reads it."""
    start = content.lstrip()[:1]
    if start not in ("{", "["):
        return
    try:
        data = json.loads(content)
    except ValueError:
        return
    messages = data.get("messages") if isinstance(data, dict) else data
    if isinstance(messages, list) and any(isinstance(m, dict) and "role" in m for m in messages):
        raise InputError(
            f"{describe(path)} is a conversation (JSON with messages), not model output: "
            f"harmonia render {path} turns it into tokens "
            f"(harmonia render {path} --format ids | harmonia {{parse,inspect}} - reads those); "
            "--text reads it as text anyway"
        )


def _without_final_newline(text: str) -> str:
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")


def completion_role(value: str, tokens: Iterable[int]) -> tuple[Role | None, Iterable[int]]:
    """The role the prompt ended with, and the tokens (``auto`` reads a few ahead).

    ``auto``: model output (after ``<|start|>assistant``) reaches its first
    ``<|message|>`` before any ``<|start|>``; a rendered conversation has
    ``<|start|>`` first.
    """
    if value != "auto":
        return (None if value == "none" else Role(value)), tokens
    it = iter(tokens)
    head = list(itertools.islice(it, _HEADER_SCAN))
    role: Role | None = Role.ASSISTANT
    for token in head:
        if token in (START, MESSAGE):
            role = None if token == START else Role.ASSISTANT
            break
    return role, itertools.chain(head, it)


def progress(
    tokens: Iterable[int], expected: int | None, label: str, *, redraw: bool | None = None
) -> Iterator[int]:
    """``tokens``, reporting on stderr about once a second how many have gone by.

    ``redraw``: the report is one line rewritten in place (the default on a
    terminal); otherwise (a log) each report is a line of its own.
    """
    tty = sys.stderr.isatty() if redraw is None else redraw
    started = last = time.monotonic()
    for count, token in enumerate(tokens, 1):
        yield token
        if count & 0xFFFF == 0 and (now := time.monotonic()) - last >= 1:
            last = now
            share = f" ({min(count / expected, 1):.0%})" if expected else ""
            line = f"{label}: {count:,} tokens{share}, {now - started:.0f} s"
            print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr)
    if tty and last != started:
        print(file=sys.stderr)
