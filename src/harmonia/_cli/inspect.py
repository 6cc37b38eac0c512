"""A readable view of a token sequence: message blocks, token boundaries, diagnostics.

:func:`inspect_tokens` runs the lenient parser over the tokens and groups them
into blocks, one per message (plus a block for tokens left over at the end).
:func:`render_terminal` colours the blocks for a terminal and
:func:`render_html` writes a self-contained page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._enums import Role
from .._names import ANALYSIS, COMMENTARY, FINAL
from .._parse import Diagnostic, EncodingLike, MessageDone, StreamableParser
from .._tokenizer import is_special_token


@dataclass(slots=True)
class Block:
    """The tokens of one message (``message`` is ``None`` for leftovers)."""

    start: int
    tokens: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    role: str | None = None
    name: str | None = None
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None
    text: str | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.role is None:
            return "unparsed tokens"
        parts = [self.role if self.name is None else f"{self.role}:{self.name}"]
        if self.channel is not None:
            parts.append(f"channel {self.channel}")
        if self.recipient is not None:
            parts.append(f"to {self.recipient}")
        if self.content_type is not None:
            parts.append(f"type {self.content_type}")
        return " · ".join(parts)


@dataclass(slots=True)
class Inspection:
    blocks: list[Block]
    diagnostics: list[Diagnostic]
    num_tokens: int


def _token_text(enc: EncodingLike, token: int) -> str:
    data = enc.tokenizer.token_bytes_table[token] if 0 <= token < 201_089 else None
    if data is None:
        return f"<invalid {token}>"
    return data.decode("utf-8", "replace")


def inspect_tokens(enc: EncodingLike, tokens: Sequence[int], role: Role | None) -> Inspection:
    """Parse ``tokens`` leniently and group them into one block per message."""
    parser = StreamableParser(enc, role, strict=False)
    blocks: list[Block] = []
    diagnostics: list[Diagnostic] = []
    current = Block(0)

    def close(done: MessageDone, next_start: int) -> Block:
        m = done.message
        current.role = m.author.role.value
        current.name = m.author.name
        current.channel, current.recipient = m.channel, m.recipient
        current.content_type, current.text = m.content_type, m.text
        blocks.append(current)
        return Block(next_start)

    for i, token in enumerate(tokens):
        current.tokens.append(token)
        current.texts.append(_token_text(enc, token))
        for event in parser.feed(token):
            if isinstance(event, Diagnostic):
                current.diagnostics.append(event)
                diagnostics.append(event)
            elif isinstance(event, MessageDone):
                current = close(event, i + 1)
    for event in parser.feed_eos():
        if isinstance(event, Diagnostic):
            current.diagnostics.append(event)
            diagnostics.append(event)
        elif isinstance(event, MessageDone):
            current = close(event, len(tokens))
    if current.tokens:
        blocks.append(current)
    return Inspection(blocks, diagnostics, len(tokens))


# -- terminal ----------------------------------------------------------------------

_ROLE_COLOURS = {"system": "35", "developer": "34", "user": "32", "assistant": "36", "tool": "33"}
_CHANNEL_COLOURS = {ANALYSIS: "2;36", COMMENTARY: "36", FINAL: "1;36"}


def _colour(code: str, text: str, enabled: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if enabled else text


def render_terminal(inspection: Inspection, *, colour: bool = True, ids: bool = False) -> str:
    """Blocks as text; special tokens are marked, roles and channels coloured."""
    lines = [
        f"{inspection.num_tokens} tokens, "
        f"{sum(b.role is not None for b in inspection.blocks)} messages, "
        f"{len(inspection.diagnostics)} diagnostics"
    ]
    for n, block in enumerate(inspection.blocks):
        code = _CHANNEL_COLOURS.get(block.channel or "", _ROLE_COLOURS.get(block.role or "", "31"))
        head = f"[{n}] {block.label} · {len(block.tokens)} tokens from #{block.start}"
        lines.append(_colour("1;" + code, head, colour))
        pieces = []
        for token, text in zip(block.tokens, block.texts, strict=True):
            shown = f"{text}" if not ids else f"{text}({token})"
            if is_special_token(token) or token >= 201_089:
                pieces.append(_colour("7;35", shown, colour) if colour else f"⟦{shown}⟧")
            else:
                pieces.append(_colour(code, shown, colour) if not ids else shown + "|")
        lines.append("  " + "".join(pieces).replace("\n", "\n  "))
        lines += [_colour("31", f"  ! {d}", colour) for d in block.diagnostics]
    return "\n".join(lines) + "\n"


# -- HTML ----------------------------------------------------------------------------

_CSS = """
body{font:14px/1.5 system-ui,sans-serif;margin:2em;background:#fafafa;color:#222}
h1{font-size:18px}.summary{color:#555;margin-bottom:1em}
.block{border:1px solid #ccc;border-left:6px solid #999;border-radius:4px;margin:0 0 1em;
background:#fff}.block header{padding:.4em .8em;background:#f0f0f0;font-weight:600}
.block header .count{float:right;font-weight:400;color:#666}
.tokens{padding:.6em .8em;font:13px/1.6 ui-monospace,monospace;white-space:pre-wrap;
word-break:break-word}.t{border-radius:2px}.t:nth-child(even){background:#eef3ff}
.t:hover{outline:1px solid #333}.sp{background:#5b2c83 !important;color:#fff;padding:0 2px}
.role-system{border-left-color:#8e44ad}.role-developer{border-left-color:#2c6fbb}
.role-user{border-left-color:#27ae60}.role-assistant{border-left-color:#16a085}
.role-tool{border-left-color:#d4a017}.role-none{border-left-color:#c0392b}
.channel-analysis header{background:#e8f6f3}.channel-final header{background:#d1f2eb}
.diag{margin:.3em .8em .6em;padding:.3em .6em;background:#fdecea;color:#922;
border-radius:3px;font-size:13px}
"""


def _html_block(n: int, block: Block) -> str:
    role_class = f"role-{block.role or 'none'}"
    channel_class = f" channel-{html.escape(block.channel)}" if block.channel else ""
    spans = []
    for offset, (token, text) in enumerate(zip(block.tokens, block.texts, strict=True)):
        special = is_special_token(token) or token >= 201_089
        cls = "t sp" if special else "t"
        title = f"#{block.start + offset} id {token}"
        spans.append(f'<span class="{cls}" title="{title}">{html.escape(text)}</span>')
    diags = "".join(f'<div class="diag">{html.escape(str(d))}</div>' for d in block.diagnostics)
    return (
        f'<section class="block {role_class}{channel_class}" data-index="{n}">'
        f"<header>[{n}] {html.escape(block.label)}"
        f'<span class="count">{len(block.tokens)} tokens</span></header>'
        f'<div class="tokens">{"".join(spans)}</div>{diags}</section>'
    )


def render_html(inspection: Inspection, title: str = "harmony tokens") -> str:
    """A self-contained HTML page (no scripts, no external resources)."""
    blocks = "\n".join(_html_block(n, b) for n, b in enumerate(inspection.blocks))
    messages = sum(b.role is not None for b in inspection.blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f'<div class="summary">{inspection.num_tokens} tokens · {messages} messages · '
        f"{len(inspection.diagnostics)} diagnostics · hover a token for its index and id</div>"
        f"\n{blocks}\n</body></html>\n"
    )
