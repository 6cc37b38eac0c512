"""The command line's shared vocabulary: the options every subcommand spells alike.

``harmonia render``, ``data``, ``chat``, ``serve`` and ``tools`` each add their
options through these helpers, so a flag means the same thing, takes the same
values and has the same default wherever it appears (docs/cli.md has the table).
An older spelling is kept as a deprecated alias that says what to write instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final, Literal

ProgressMode = Literal["auto", "lines", "none"]
PROGRESS_MODES: Final[tuple[ProgressMode, ...]] = ("auto", "lines", "none")

#: The standard-input argument of every command that reads a file.
STDIN: Final = "-"


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new option's ``dest`` and says so."""

    def __init__(self, *args: Any, new: str, value: Any = None, **kwargs: Any) -> None:
        self.new = new
        self.value = value
        if value is not None:
            kwargs["nargs"] = 0
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        value = self.value if self.value is not None else values
        written = self.new if self.value is None else f"{self.new} {self.value}"
        print(f"{parser.prog}: {option_string} is deprecated; write {written}", file=sys.stderr)
        setattr(namespace, self.dest, value)


def add_force(parser: argparse.ArgumentParser | Any, what: str = "the output") -> None:
    """``--force``: replace an output that exists (without it, an existing one is refused)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace {what} if it exists (without --force an existing output is refused)",
    )


def add_progress(parser: argparse.ArgumentParser | Any) -> None:
    """``--progress {auto,lines,none}`` (and the old ``--no-progress``)."""
    parser.add_argument(
        "--progress",
        choices=PROGRESS_MODES,
        default="auto",
        nargs="?",
        const="lines",
        help="progress on stderr: auto redraws one line when stderr is a terminal and is "
        "quiet otherwise; lines: a plain line per report (for logs); none: quiet",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action=DeprecatedAlias,
        new="--progress",
        value="none",
        help="deprecated: --progress none",
    )


def add_cot_policy(
    parser: argparse.ArgumentParser | Any,
    choices: Sequence[str],
    *,
    default: str | None,
    help: str,
    old: str | None = None,
) -> None:
    """``--cot-policy``: which earlier reasoning a prompt or sample keeps.

    ``old`` is a former spelling (``--cot``), kept as a deprecated alias.
    """
    parser.add_argument("--cot-policy", choices=tuple(choices), default=default, help=help)
    if old is not None:
        parser.add_argument(
            old,
            dest="cot_policy",
            choices=tuple(choices),
            action=DeprecatedAlias,
            new="--cot-policy",
            help="deprecated: --cot-policy",
        )


def progress_on_terminal(mode: str, stream: Any) -> bool | None:
    """How to report: True a redrawn line, False plain lines, None nothing."""
    if mode == "lines":
        return False
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return True if mode == "auto" and tty else None
