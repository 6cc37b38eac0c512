"""The batch function: input rows to training rows, problems and statistics.

Stateless apart from a per-process encoding, so the built-in runner, Hugging Face
``datasets.map`` and Ray Data all call the same function and get the same rows.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from typing import Any, Final

from harmonia import HarmonyEncoding, HarmonyError, RenderError, load_harmony_encoding
from harmonia.vocabulary import CHANNELS

from ._hf_template import render_hf_for_training
from ._inputs import (
    InputOptions,
    check_contents,
    convert_row,
    is_mapping,
    row_date,
    tools_from_json,
)
from ._policy import TrainPolicy, resolve_policy
from ._problems import Problem, RowError
from ._sample import TRAINED, UNFAITHFUL, TrainSample, render_for_training

_HF_ROLES: Final = frozenset(("system", "developer", "user", "assistant", "tool"))


@lru_cache(maxsize=1)
def default_encoding() -> HarmonyEncoding:
    """The gpt-oss encoding, loaded once per process (workers pickle nothing of it).

    Batch work encodes a lot of text, so the quicktok engine is built at once
    instead of after the ``auto`` engine's pure-Python start.
    """
    return load_harmony_encoding("HarmonyGptOss", engine="quicktok")


@dataclass
class Stats:
    """Counts over rows; ``merge`` adds another's (the parent merges its workers')."""

    rows: int = 0
    rows_ok: int = 0
    samples: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    formats: Counter[str] = field(default_factory=Counter)
    #: trained tokens by the channel of their message ("none": no channel)
    trained_by_channel: Counter[str] = field(default_factory=Counter)
    #: samples by length, in powers of two: "512" counts lengths 257..512
    lengths: Counter[str] = field(default_factory=Counter)
    #: rows refused (E151) by the header field that cannot be read back
    refused_fields: Counter[str] = field(default_factory=Counter)

    def merge(self, other: Stats) -> None:
        for item in fields(self):
            mine = getattr(self, item.name)
            if isinstance(mine, Counter):
                mine.update(getattr(other, item.name))
            else:
                setattr(self, item.name, mine + getattr(other, item.name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "rows_ok": self.rows_ok,
            "rows_rejected": self.rows - self.rows_ok,
            "samples": self.samples,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "trained_fraction": round(self.trained_tokens / self.tokens, 6) if self.tokens else 0.0,
            "problems": dict(sorted(self.problems.items())),
            "formats": dict(sorted(self.formats.items())),
            "trained_by_channel": dict(sorted(self.trained_by_channel.items())),
            "lengths": {k: self.lengths[k] for k in sorted(self.lengths, key=int)},
            "refused_fields": dict(sorted(self.refused_fields.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stats:
        # The counters are the fields with a default_factory (and may be absent).
        values: dict[str, Any] = {
            f.name: data[f.name] if f.default is not MISSING else Counter(data.get(f.name, {}))
            for f in fields(cls)
        }
        return cls(**values)


@dataclass
class Batch:
    """Training rows (one per sample) in input order, plus problems and stats."""

    input_ids: list[list[int]] = field(default_factory=list)
    loss_mask: list[bytes] = field(default_factory=list)
    source_line: list[int] = field(default_factory=list)
    sample_index: list[int] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    rejected: list[tuple[Problem, str]] = field(default_factory=list)  # (problem, raw row)
    stats: Stats = field(default_factory=Stats)


def render_batch(
    rows: Iterable[str | bytes | Mapping[str, Any]],
    *,
    policy: TrainPolicy | str | None = None,
    options: InputOptions | None = None,
    first_line: int = 1,
    line_numbers: Sequence[int] | None = None,
    source: str = "",
    encoding: HarmonyEncoding | None = None,
) -> Batch:
    """Render rows (JSON lines or dicts) into training rows, in order.

    Row ``k`` is reported as line ``line_numbers[k]`` when given, else
    ``first_line + k``; ``source`` names the file in problems.
    """
    policy = resolve_policy(policy)
    options = options or InputOptions()
    enc = encoding or default_encoding()
    out = Batch()
    stats = out.stats
    for k, raw in enumerate(rows):
        line = first_line + k if line_numbers is None else line_numbers[k]
        stats.rows += 1
        try:
            row: object = raw
            if isinstance(row, (bytes, bytearray)):
                row = _utf8(row)
            if isinstance(row, str):
                try:
                    row = json.loads(row)
                except json.JSONDecodeError as exc:
                    # json counts lines inside the row; the problem's line is the file's.
                    where = f"column {exc.colno}" if exc.lineno == 1 else f"character {exc.pos}"
                    raise RowError("E101", f"not JSON: {exc.msg} at {where}") from None
                except ValueError as exc:
                    raise RowError("E101", f"not JSON: {exc}") from None
            if options.dialect != "hf":
                converted = convert_row(row, options)
                warnings = converted.warnings
                stats.formats[converted.format] += 1
                with _refusals(stats):
                    samples = render_for_training(
                        converted.conversation, enc, policy, weights=converted.weights
                    )
            else:
                samples, warnings = _hf_row(row, enc, policy, options, stats), ()
                stats.formats["hf"] += 1
            if not samples:
                raise RowError("E140", f"longer than max_length={policy.max_length}")
            if not any(1 in s.loss_mask for s in samples):
                raise RowError("E120", "no token is trained under the policy")
        except RowError as exc:
            problem = Problem(exc.code, exc.reason, line, source)
            stats.problems[exc.code] += 1
            out.problems.append(problem)
            if isinstance(raw, (bytes, bytearray)):
                text = raw.decode("utf-8", errors="backslashreplace")
            elif isinstance(raw, str):
                text = raw
            else:
                text = json.dumps(raw, ensure_ascii=False)
            out.rejected.append((problem, text))
            continue
        stats.rows_ok += 1
        for code, message in warnings:
            stats.problems[code] += 1
            out.problems.append(Problem(code, message, line, source))
        if UNFAITHFUL in samples[0].reasons and not any(TRAINED in s.reasons for s in samples[1:]):
            stats.problems["W203"] += 1
        for sample in samples:
            if sample.truncated:
                stats.problems["W206"] += 1
            out.input_ids.append(sample.input_ids)
            out.loss_mask.append(sample.loss_mask)
            out.source_line.append(line)
            out.sample_index.append(sample.sample_index)
            stats.samples += 1
            stats.tokens += len(sample.input_ids)
            stats.trained_tokens += sample.loss_mask.count(1)
            stats.lengths[str(1 << max(len(sample.input_ids) - 1, 0).bit_length())] += 1
            _count_channels(sample, channel_names(enc), stats.trained_by_channel)
    return out


def _utf8(raw: bytes | bytearray) -> str:
    """A line's text; a line that is not UTF-8 is rejected (E104), never decoded
    with replacement characters the model would then be trained on."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.end].hex(" ")
        raise RowError("E104", f"not UTF-8 at byte {exc.start} ({bad}): {exc.reason}") from None


#: The header fields a render refuses when they cannot be read back (E151).
HEADER_FIELDS: Final = ("author.name", "recipient", "channel", "content_type")


@contextlib.contextmanager
def _refusals(stats: Stats) -> Iterator[None]:
    """A conversation the renderer refuses as a reject: E151 names the header field
    that cannot be read back (and counts it in ``stats.refused_fields``)."""
    try:
        yield
    except RowError:
        raise
    except HarmonyError as exc:
        if isinstance(exc, RenderError) and exc.path in HEADER_FIELDS:
            stats.refused_fields[exc.path] += 1
            where = f"message {exc.message_index} field {exc.path}"
            raise RowError("E151", f"{where}: {exc.reason}") from None
        raise RowError("E140" if "max_length" in str(exc) else "E150", str(exc)) from None


def _hf_row(
    row: object, enc: HarmonyEncoding, policy: TrainPolicy, options: InputOptions, stats: Stats
) -> list[TrainSample]:
    """A row rendered in the Hugging Face template's dialect."""
    if not isinstance(row, Mapping):
        raise RowError("E150", f"a row must be a JSON object, got {type(row).__name__}")
    row = tools_from_json(row)
    messages = row.get("messages")
    if isinstance(messages, list):
        for i, m in enumerate(messages):
            if is_mapping(m) and m.get("role") not in _HF_ROLES:
                raise RowError("E110", f"unknown role {m.get('role')!r} at messages[{i}].role")
        check_contents(messages)
    date = row_date(row, options)
    if date is None:
        raise RowError("E150", "the row has no 'date' (YYYY-MM-DD) and the hf dialect needs one")
    with _refusals(stats):
        return render_hf_for_training(
            row, enc, policy, date=date, reasoning_effort=options.reasoning_effort
        )


@lru_cache(maxsize=4)
def channel_names(enc: HarmonyEncoding) -> dict[tuple[int, ...], str]:
    """The tokens of each channel name -> the name."""
    return {tuple(enc.encode_ordinary(n)): n for n in CHANNELS}


def _count_channels(
    sample: TrainSample, names: Mapping[tuple[int, ...], str], into: Counter[str]
) -> None:
    """Trained tokens by the channel of their message (read from the tokens after
    ``<|channel|>``, so both dialects are counted alike)."""
    mask, ids = sample.loss_mask, sample.input_ids
    # The renderer's records: (message, start, (recipient, channel, content type,
    # message) offsets from start, stop); no MessageSpan objects are built.
    for _, start, offsets, stop in sample.spans.records:
        trained = mask.count(1, start, stop)
        if trained:
            name = tuple(ids[start + offsets[1] + 1 : start + offsets[2]])
            into[names.get(name, "other") if name else "none"] += trained
