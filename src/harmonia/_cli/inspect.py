"""A readable view of a token sequence: message blocks, token boundaries, diagnostics.

:func:`walk` runs the lenient parser over the tokens and yields each token,
then a :class:`BlockDone` at the end of each message (and of any tokens left
over). Everything streams: :func:`write_terminal` holds one message at a time
and :func:`write_html` one token, so a token file of any size is drawn in
memory bounded by the vocabulary and the longest message.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TextIO

from .._enums import Role, StreamState
from .._names import ANALYSIS, COMMENTARY, FINAL
from .._parse import Diagnostic, EncodingLike, MessageDone, StreamableParser
from .._tokenizer.special_tokens import FIRST_SPECIAL, START

#: Once a parser has read this many tokens it is replaced, at the next message
#: boundary, by a fresh one: a parser keeps every token and message it has seen.
RESET_AFTER = 1 << 16
#: The most tokens ``<|start|>ROLE`` takes (every role is one or two tokens).
_PROMPT_END = 3


@dataclass(slots=True)
class TokenView:
    """One token: its index in the input, id, text, and whether it is special or unknown."""

    index: int
    token: int
    text: str
    marked: bool


@dataclass(slots=True)
class BlockDone:
    """The end of a block: one message, or (``role`` is ``None``) tokens left over."""

    number: int
    start: int
    count: int
    role: str | None = None
    name: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: ``<|start|>ROLE`` at the very end: a prompt rendered for completion.
    prompt_end: bool = False

    @property
    def label(self) -> str:
        if self.prompt_end:
            return f"{self.role} · the prompt ends here: the model writes this message"
        if self.role is None:
            return "unparsed tokens"
        parts = [self.role if self.name is None else f"{self.role}:{self.name}"]
        fields = (("channel", self.channel), ("to", self.recipient), ("type", self.content_type))
        parts += [f"{word} {value}" for word, value in fields if value is not None]
        return " · ".join(parts)


@dataclass(slots=True)
class Totals:
    """Counts so far; complete once the walk is exhausted."""

    tokens: int = 0
    messages: int = 0
    diagnostics: int = 0

    def __str__(self) -> str:
        counts = {"token": self.tokens, "message": self.messages, "diagnostic": self.diagnostics}
        return ", ".join(plural(n, word) for word, n in counts.items())


def _texts(enc: EncodingLike) -> Callable[[int], str]:
    table = enc.tokenizer.token_bytes_table

    @lru_cache(maxsize=1 << 14)
    def text(token: int) -> str:
        data = table[token] if 0 <= token < len(table) else None
        return f"<invalid {token}>" if data is None else data.decode("utf-8", "replace")

    return text


def walk(
    enc: EncodingLike, tokens: Iterable[int], role: Role | None, totals: Totals
) -> Iterator[TokenView | BlockDone]:
    """Parse ``tokens`` leniently; yield each token, and each block as it ends."""
    text = _texts(enc)
    # A fresh parser is the same machine as one between messages, unless a role
    # other than assistant was given (it is also the role of recovered headers).
    resettable = role in (None, Role.ASSISTANT)
    parser = StreamableParser(enc, role, strict=False)
    base = 0  # index of the current parser's first token
    block = BlockDone(0, 0, 0)

    def note(events: Sequence[object]) -> Iterator[BlockDone]:
        nonlocal block
        for event in events:
            if isinstance(event, Diagnostic):
                if base:
                    event = dataclasses.replace(event, token_index=event.token_index + base)
                block.diagnostics.append(event)
                totals.diagnostics += 1
            elif isinstance(event, MessageDone):
                m = event.message
                block.role, block.name = m.author.role.value, m.author.name
                block.channel, block.recipient = m.channel, m.recipient
                block.content_type = m.content_type
                totals.messages += 1
                yield block
                block = BlockDone(block.number + 1, totals.tokens, 0)

    feed = parser.feed
    tail: list[int] = []  # a block's first tokens, while it has at most _PROMPT_END
    for index, token in enumerate(tokens):
        totals.tokens = index + 1
        block.count += 1
        if block.count == 1:
            tail.clear()
        if block.count <= _PROMPT_END:
            tail.append(token)
        # every id from FIRST_SPECIAL on is special (or past the vocabulary)
        yield TokenView(index, token, text(token), not 0 <= token < FIRST_SPECIAL)
        events = feed(token)
        if events:  # most tokens report nothing
            yield from note(events)
        if (
            resettable
            and index + 1 - base >= RESET_AFTER
            and parser.state is StreamState.EXPECT_START
            and block.count == 0
        ):
            parser, base = StreamableParser(enc, None, strict=False), index + 1
            feed = parser.feed
    role_at_end = _completion_role(enc, tail) if block.count == len(tail) else None
    if role_at_end is not None:
        # A completion prompt ends with <|start|>ROLE: not a truncated message.
        block.role, block.prompt_end = role_at_end, True
        yield block
        return
    if not totals.tokens:
        return  # an empty input: nothing in it is cut short
    yield from note(parser.feed_eos())
    if block.count:
        yield block


def _completion_role(enc: EncodingLike, tokens: Sequence[int]) -> str | None:
    """The role of ``<|start|>ROLE`` (the end of a completion prompt), else ``None``."""
    if len(tokens) < 2 or tokens[0] != START or any(not 0 <= t < FIRST_SPECIAL for t in tokens[1:]):
        return None
    table = enc.tokenizer.token_bytes_table
    word = b"".join(table[t] for t in tokens[1:]).decode("utf-8", "replace")
    return word if word in {r.value for r in Role} else None


def plural(count: int, word: str) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


# -- terminal ----------------------------------------------------------------------

_ROLE_COLOURS = {"system": "35", "developer": "34", "user": "32", "assistant": "36", "tool": "33"}
_CHANNEL_COLOURS = {ANALYSIS: "2;36", COMMENTARY: "36", FINAL: "1;36"}


def _colour(code: str, text: str, enabled: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if enabled else text


def write_terminal(
    events: Iterable[TokenView | BlockDone],
    totals: Totals,
    out: TextIO,
    *,
    colour: bool = True,
    ids: bool = False,
) -> None:
    """Each block as text (special tokens marked, roles and channels coloured), then totals."""
    pending: list[TokenView] = []
    for event in events:
        if isinstance(event, TokenView):
            pending.append(event)
            continue
        block = event
        code = _CHANNEL_COLOURS.get(block.channel or "", _ROLE_COLOURS.get(block.role or "", "31"))
        head = (
            f"[{block.number}] {block.label} · {plural(block.count, 'token')} from #{block.start}"
        )
        pieces = []
        for t in pending:
            shown = t.text if not ids else f"{t.text}({t.token})"
            if t.marked:
                pieces.append(_colour("7;35", shown, colour) if colour else f"⟦{shown}⟧")
            else:
                pieces.append(_colour(code, shown, colour) if not ids else shown + "|")
        pending.clear()
        out.write(_colour("1;" + code, head, colour) + "\n")
        out.write("  " + "".join(pieces).replace("\n", "\n  ") + "\n")
        for d in block.diagnostics:
            out.write(_colour("31", f"  ! {d}", colour) + "\n")
    out.write(f"{totals}\n")


# -- HTML ----------------------------------------------------------------------------

# The page is written in one pass, so what is known only at a block's end (its
# role, channel, header) and at the page's end (the totals) is written after what
# it describes: CSS order moves it up, and the header draws the block's coloured
# left edge (a ::before spanning the positioned section), so nothing is held back.
#: What a token costs in the page (``<span title="#index id ID">text</span>``), about.
PAGE_BYTES_PER_TOKEN = 45
#: Pages estimated larger than this are announced before they are written.
HUGE_PAGE = 50_000_000

_CSS = """
body{font:14px/1.5 system-ui,sans-serif;margin:2em;background:#fafafa;color:#222;
display:flex;flex-direction:column}h1{font-size:18px;order:-2}
.summary{color:#555;margin-bottom:1em;order:-1}
.block{position:relative;border:1px solid #ccc;border-left-width:6px;border-radius:4px;
margin:0 0 1em;background:#fff;display:flex;flex-direction:column}
.block header{padding:.4em .8em;background:#f0f0f0;font-weight:600;order:-1}
.block header::before{content:"";position:absolute;left:-6px;top:-1px;bottom:-1px;width:6px;
border-radius:4px 0 0 4px;background:#999}
.block header .count{float:right;font-weight:400;color:#666}
.tokens{padding:.6em .8em;font:13px/1.6 ui-monospace,monospace;white-space:pre-wrap;
word-break:break-word}.tokens span{border-radius:2px}
.tokens span:nth-child(even){background:#eef3ff}
.tokens span:hover{outline:1px solid #333}
.tokens .sp{background:#5b2c83 !important;color:#fff;padding:0 2px}
.role-system::before{background:#8e44ad !important}
.role-developer::before{background:#2c6fbb !important}
.role-user::before{background:#27ae60 !important}
.role-assistant::before{background:#16a085 !important}
.role-tool::before{background:#d4a017 !important}
.role-none::before{background:#c0392b !important}
header.channel-analysis{background:#e8f6f3}header.channel-final{background:#d1f2eb}
.diag{margin:.3em .8em .6em;padding:.3em .6em;background:#fdecea;color:#922;
border-radius:3px;font-size:13px}
"""


def write_html(
    events: Iterable[TokenView | BlockDone],
    totals: Totals,
    out: TextIO,
    title: str = "harmony tokens",
) -> None:
    """A self-contained HTML page (no scripts, no external resources), written as it goes."""
    write = out.write
    write(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>\n"
    )
    escape = lru_cache(maxsize=1 << 14)(html.escape)
    in_block = False
    for event in events:
        if not in_block:
            write('<section class="block"><div class="tokens">')
            in_block = True
        if isinstance(event, TokenView):
            cls = ' class="sp"' if event.marked else ""
            write(f'<span{cls} title="#{event.index} id {event.token}">{escape(event.text)}</span>')
            continue
        b = event
        classes = f"role-{b.role or 'none'}" + (
            f" channel-{html.escape(b.channel)}" if b.channel else ""
        )
        diags = "".join(f'<div class="diag">{html.escape(str(d))}</div>' for d in b.diagnostics)
        write(
            f'</div>{diags}<header class="{classes}">[{b.number}] {html.escape(b.label)}'
            f'<span class="count">{plural(b.count, "token")}</span></header></section>\n'
        )
        in_block = False
    write(
        f'<div class="summary">{str(totals).replace(", ", " · ")} · '
        "hover a token for its index and id</div>"
        "\n</body></html>\n"
    )
