"""A sample's tokens, coloured: context dim, trained tokens by channel, specials bold.

Each message gets a line saying why it is, or is not, trained. The same view is
written for a terminal (ANSI colours) and as a self-contained HTML page.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Iterator, Sequence
from typing import Final

from harmonia import HarmonyEncoding, Message, Role
from harmonia.vocabulary import ANALYSIS, COMMENTARY, FINAL, FIRST_SPECIAL_ID

from ._sample import TrainSample

_ANSI: Final = {ANALYSIS: "36", COMMENTARY: "33", FINAL: "32", None: "35"}
_CSS: Final = {ANALYSIS: "#0e7490", COMMENTARY: "#a16207", FINAL: "#15803d", None: "#86198f"}


def _runs(
    sample: TrainSample, messages: Sequence[Message]
) -> Iterator[tuple[bool, str | None, bool, list[int]]]:
    """(trained, channel, special, ids) runs of the sample in order."""
    ids, mask = sample.input_ids, sample.loss_mask
    channel_at: list[str | None] = [None] * len(ids)
    for span in sample.spans:
        if span.message_index is not None:
            channel = messages[span.message_index].channel
            for p in range(span.start, min(span.stop, len(ids))):
                channel_at[p] = channel
    run: list[int] = []
    style: tuple[bool, str | None, bool] | None = None
    for p, token in enumerate(ids):
        now = (bool(mask[p]), channel_at[p], token >= FIRST_SPECIAL_ID)
        if style is not None and now != style:
            yield (*style, run)
            run = []
        style = now
        run.append(token)
    if style is not None:
        yield (*style, run)


def _describe(message: Message) -> str:
    role = message.author.role
    who = (message.author.name or "") if role is Role.TOOL else role.value
    if message.channel:
        who += f"/{message.channel}"
    if message.recipient and message.recipient != "all":
        who += f" to={message.recipient}"
    return who


def _heading(sample: TrainSample) -> str:
    return (
        f"sample {sample.sample_index}: {len(sample.input_ids)} tokens, {sample.n_trained} trained"
    )


def _reasons(sample: TrainSample, messages: Sequence[Message]) -> list[str]:
    """One line per message: who wrote it and why it is, or is not, trained."""
    return [f"[{i}] {_describe(messages[i])}: {why}" for i, why in enumerate(sample.reasons)]


def terminal_view(
    encoding: HarmonyEncoding,
    samples: Sequence[TrainSample],
    messages: Sequence[Message],
    color: bool,
) -> str:
    out: list[str] = []
    for sample in samples:
        out.append(_heading(sample) + (" (truncated)" if sample.truncated else ""))
        runs = [(t, c, s, encoding.decode(run)) for t, c, s, run in _runs(sample, messages)]
        if color:  # context dim (2), trained in its channel's colour, specials bold (1)
            text = [
                f"\x1b[{_ANSI[c] if t else '2'}{';1' if s else ''}m{p}\x1b[0m"
                for t, c, s, p in runs
            ]
        else:  # without colour, only trained or not matters
            text = []
            for trained, group in itertools.groupby(runs, key=lambda r: r[0]):
                piece = "".join(r[3] for r in group)
                text.append(f"⟦{piece}⟧" if trained else piece)
        out.append("".join(text))
        out += ("  " + line for line in _reasons(sample, messages))
    return "\n".join(out) + "\n"


def html_view(
    encoding: HarmonyEncoding,
    samples: Sequence[TrainSample],
    messages: Sequence[Message],
    title: str,
) -> str:
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif}pre{white-space:pre-wrap;font-size:13px}"
        ".ctx{color:#888}.sp{font-weight:bold;border:1px solid #ccc;border-radius:3px}"
        "</style>",
        f"<h1>{html.escape(title)}</h1>",
        "<p>Grey: context. Coloured: trained, by channel "
        + " ".join(
            f"<span style='color:{c}'>{html.escape(str(k or 'other'))}</span>"
            for k, c in _CSS.items()
        )
        + ".</p>",
    ]
    for sample in samples:
        parts.append(f"<h2>{_heading(sample)}</h2><pre>")
        for trained, channel, special, run in _runs(sample, messages):
            classes = ("sp " if special else "") + ("" if trained else "ctx")
            style = f" style='color:{_CSS[channel]}'" if trained else ""
            parts.append(
                f"<span class='{classes.strip()}'{style}>{html.escape(encoding.decode(run))}</span>"
            )
        parts.append("</pre><ul>")
        parts += (f"<li>{html.escape(line)}</li>" for line in _reasons(sample, messages))
        parts.append("</ul>")
    return "\n".join(parts) + "\n"
