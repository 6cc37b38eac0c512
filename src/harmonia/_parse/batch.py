"""Batch parsing: a loop over :class:`~.parser.StreamableParser`, so batch and streaming agree."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .._enums import Role
from .._message import Message
from .events import Diagnostic, EncodingLike
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

    A loop over :class:`StreamableParser`, then end of stream. A last message
    without its stop token is returned as it is; lenient mode reports it with a
    ``truncated`` diagnostic, and ``complete=True`` makes strict mode raise
    :class:`~harmonia.ParseError` for it (see :meth:`StreamableParser.process_eos`).
    """
    if isinstance(completion, str):
        completion = encoding.tokenizer.encode(completion, allowed_special="all")
    parser = StreamableParser(encoding, role, strict=strict)
    process = parser.process
    for token in completion:
        process(token)
    parser.process_eos(complete=complete)
    return ParseResult(parser.messages, parser.diagnostics)


def parse_tokens(
    encoding: EncodingLike,
    tokens: Iterable[int],
    role: Role | None = None,
    *,
    strict: bool = True,
    complete: bool = False,
) -> list[Message]:
    """``parse_messages_from_completion_tokens``: the messages of a completion."""
    return parse_completion(encoding, tokens, role, strict=strict, complete=complete).messages


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
