"""Batch parsing: the fast path of :mod:`.fastpath`, else a loop over the streaming parser.

The fast path accepts only completions that the streaming parser reads without
an error or a diagnostic, and reads them as the streaming parser does; anything
else is parsed by a loop over :class:`~.parser.StreamableParser`. Batch and
streaming agree either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .._enums import Role
from .._message import Message
from .events import Diagnostic, EncodingLike, make_message
from .fastpath import read_clean
from .parser import StreamableParser


class ParseResult(NamedTuple):
    """Messages and the recoveries made while parsing them."""

    messages: list[Message]
    diagnostics: tuple[Diagnostic, ...]


def parse_completion(
    encoding: EncodingLike,
    completion: Iterable[int] | str,
    role: Role | None = None,
    *,
    strict: bool = True,
    complete: bool = False,
) -> ParseResult:
    """Parse a whole completion (token ids, or text with special tokens spelled out).

    The messages, diagnostics and errors of a loop over :class:`StreamableParser`
    and then the end of the stream (most completions take a faster path to the
    same answer: :mod:`harmonia._parse.fastpath`). A last message
    without its stop token is returned as it is; lenient mode reports it with a
    ``truncated`` diagnostic, and ``complete=True`` makes strict mode raise
    :class:`~harmonia.ParseError` for it (see :meth:`StreamableParser.process_eos`).
    """
    if isinstance(completion, str):
        completion = encoding.tokenizer.encode(completion, allowed_special="all")
    tokens = completion if isinstance(completion, list) else list(completion)
    if role is None or isinstance(role, Role):  # otherwise the parser converts or refuses it
        clean = read_clean(
            encoding.tokenizer.token_bytes_table,
            tokens,
            role,
            strict=bool(strict),
            complete=complete,
        )
        if clean is not None:
            return ParseResult([make_message(header, text) for header, text in clean], ())
    parser = StreamableParser(encoding, role, strict=strict)
    process = parser.process
    for token in tokens:
        process(token)
    parser.process_eos(complete=complete)
    return ParseResult(parser.messages, parser.diagnostics)


def parse_text(
    encoding: EncodingLike,
    text: str,
    role: Role | None = None,
    *,
    strict: bool = True,
    complete: bool = False,
) -> list[Message]:
    """Parse a completion given as text, special tokens spelled out (``<|start|>``...).

    Some servers return completions as text; every special-token spelling in it
    is read as that special token.

    >>> import harmonia
    >>> enc = harmonia.load_harmony_encoding("HarmonyGptOss")
    >>> [m.channel for m in parse_text(enc, "<|channel|>analysis<|message|>hm<|end|>"
    ...                                     "<|start|>assistant<|channel|>final<|message|>4",
    ...                                     Role.ASSISTANT)]
    ['analysis', 'final']
    """
    return parse_completion(encoding, text, role, strict=strict, complete=complete).messages
