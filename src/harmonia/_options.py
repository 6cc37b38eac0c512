"""The command line's shared vocabulary: the options every subcommand spells alike.

``harmonia render``, ``data``, ``chat``, ``serve`` and ``tools`` each add their
options through these helpers, so a flag means the same thing, takes the same
values and has the same default wherever it appears (docs/cli.md has the table).
There are no aliases: a flag has one spelling (the package has no users whose
scripts an old one would protect).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Final, Literal, TextIO, TypeVar, get_args, get_origin, get_type_hints

from ._errors import HarmonyError
from ._names import COT_POLICY_NAMES

ProgressMode = Literal["auto", "lines", "none"]
PROGRESS_MODES: Final[tuple[ProgressMode, ...]] = get_args(ProgressMode)

#: The standard-input argument of every command that reads a file.
STDIN: Final = "-"

T = TypeVar("T")


class Commands:
    """Where subcommands are registered: the one way every ``harmonia`` command adds one.

    ``harmonia`` gives each app module (``chat``, ``serve``, ``tools``, ``data``) a
    ``Commands`` for its ``add_subcommand(commands)``; a command with commands of
    its own (``data build``, ``tools browser search``) opens them with
    :meth:`nested`. Every command so gets the same help layout, a description
    (its help line unless it says more), and ``func(args, out) -> int`` as the
    handler ``harmonia`` runs.
    """

    def __init__(
        self,
        parser: argparse.ArgumentParser,
        *,
        dest: str = "command",
        metavar: str = "COMMAND",
        help: str | None = None,
        formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
    ) -> None:
        self._sub = parser.add_subparsers(dest=dest, required=True, metavar=metavar, help=help)
        self.formatter_class = formatter_class

    def add(
        self,
        name: str,
        help: str,
        run: Any = None,
        *,
        description: str | None = None,
        epilog: str | None = None,
        add_help: bool = True,
    ) -> argparse.ArgumentParser:
        """The parser of the command ``name``; ``run(args, out) -> int`` handles it."""
        parser: argparse.ArgumentParser = self._sub.add_parser(
            name,
            help=help,
            description=help if description is None else description,
            epilog=epilog,
            formatter_class=self.formatter_class,
            add_help=add_help,
        )
        if run is not None:
            parser.set_defaults(func=run)
        return parser

    def nested(
        self, parser: argparse.ArgumentParser, dest: str, help: str, *, metavar: str = "COMMAND"
    ) -> Commands:
        """The commands of the command ``parser`` (the word chosen lands in ``dest``)."""
        return Commands(
            parser, dest=dest, metavar=metavar, help=help, formatter_class=self.formatter_class
        )


#: The exit status after Ctrl-C (SIGINT), as shells report a process it ended.
EXIT_INTERRUPTED: Final = 130


def run_command(args: argparse.Namespace, out: TextIO, words: str) -> int:
    """Run the parsed command's ``func(args, out)``; its exit status. Every command's
    failures end the same way: one line on stderr that starts with ``words``
    (``harmonia data build``), never a traceback."""
    try:
        return int(args.func(args, out))
    except HarmonyError as exc:
        print(f"{words}: {str(exc).replace(chr(10), ' ')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # One line, no traceback; what was being written was never renamed into place.
        hint = getattr(args, "on_interrupt", None)
        print(f"{words}: interrupted{'; ' + hint if hint else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as cat does, and keep
        # Python from failing again when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # reading an input or writing an output
        print(f"{words}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1


# -- the one way a flag is declared -------------------------------------------------------
#
# Every flag of every command is an :class:`Option`: a dataclass field's metadata (an app's
# settings, below) or a standalone one given to :func:`add_flags`. Both reach argparse
# through :func:`_add` only, and a flag several commands share is one constant or one
# function here (``force``, ``PROGRESS``, ``COLOR``, ``cot_policy``), so it cannot drift
# apart between commands. tests/cli/test_cli_conventions.py holds every other module to it.


@dataclass(frozen=True)
class Option:
    """One flag (or positional argument) as the command line shows it.

    On a dataclass field (see :func:`option`) the field gives the default, the type and
    the ``dest``; a standalone option (see :func:`flag`) says them itself.
    """

    help: str
    flag: str | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    #: The kinds of command that take the option (empty: every command given the class).
    scope: tuple[str, ...] = ()
    #: Standalone options only (a field's come from the field).
    default: Any = None
    type: Any = None
    action: str | None = None
    dest: str | None = None
    required: bool = False
    short: str | None = None
    version: str | None = None
    nargs: str | None = None
    #: What the parsed value becomes in the dataclass (``--date none`` -> ``None``).
    convert: Callable[[Any], Any] | None = None

    def replace(self, **changes: Any) -> Option:
        """This option with ``changes`` (a shared flag with its command's help line)."""
        return dataclasses.replace(self, **changes)


def flag(name: str, help: str, *, choices: Sequence[Any] | None = None, **more: Any) -> Option:
    """A standalone option: ``--name`` (or a positional argument ``name``); ``more`` are
    :class:`Option`'s fields (``default``, ``type``, ``action``, ``metavar``, ...)."""
    return Option(help, name, None if choices is None else tuple(choices), **more)


def add_flags(
    parser: argparse.ArgumentParser | Any,
    *options: Option,
    title: str | None = None,
    exclusive: bool = False,
) -> None:
    """Add standalone options to ``parser`` (in a group titled ``title``; ``exclusive``:
    at most one of them may be given)."""
    if exclusive:
        target = parser.add_mutually_exclusive_group()
    elif title is not None:
        target = parser.add_argument_group(title)
    else:
        target = parser
    for spec in options:  # each made by flag(), which names it
        _add(target, spec, default=spec.default)


def _add(target: Any, spec: Option, *, default: Any, dest: str | None = None) -> None:
    """The one place an option reaches argparse."""
    assert spec.flag is not None
    names = [spec.flag] if spec.short is None else [spec.short, spec.flag]
    kwargs: dict[str, Any] = {"help": spec.help}
    if spec.action == "version":
        target.add_argument(*names, action="version", version=spec.version, help=spec.help)
        return
    if spec.action is not None:
        kwargs["action"] = spec.action
    if spec.action not in ("store_true", "store_false"):
        kwargs.update(choices=spec.choices, metavar=spec.metavar)
        if spec.type is not None:
            kwargs["type"] = spec.type
        if spec.nargs is not None:
            kwargs["nargs"] = spec.nargs
    positional = not spec.flag.startswith("-")
    if dest is not None or spec.dest is not None:
        kwargs["dest"] = dest or spec.dest
    if spec.required and not positional:
        kwargs["required"] = True
    elif default is not None:
        kwargs["default"] = default
        if positional:  # a positional argument with a default may be left out
            kwargs["nargs"] = "?"
    target.add_argument(*names, **kwargs)


def force(what: str = "the output") -> Option:
    """``--force``: replace an output that exists (without it, an existing one is refused)."""
    return flag(
        "--force",
        f"replace {what} if it exists (without --force an existing output is refused)",
        action="store_true",
    )


#: ``--progress {auto,lines,none}``.
PROGRESS: Final = flag(
    "--progress",
    "progress on stderr: auto redraws one line when stderr is a terminal and is "
    "quiet otherwise; lines: a plain line per report (for logs); none: quiet",
    choices=PROGRESS_MODES,
    default="auto",
)

#: ``--color {auto,always,never}``.
COLOR: Final = flag(
    "--color",
    "colour the terminal view (auto: when stdout is a terminal and NO_COLOR is not set)",
    choices=("auto", "always", "never"),
    default="auto",
)


def use_color(stream: TextIO, choice: str = "auto") -> bool:
    """What ``--color`` means for ``stream``, the same in every command: ``always``,
    ``never``, or ``auto``: a terminal, unless ``NO_COLOR`` is set (no-color.org)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def cot_policy(*, default: str | None, help: str) -> Option:
    """``--cot-policy``: which earlier reasoning a prompt or sample keeps; the same
    choices (``harmonia.COT_POLICIES``) in ``render``, ``chat``, ``serve`` and ``data``."""
    return flag("--cot-policy", help, choices=COT_POLICY_NAMES, default=default)


def progress_on_terminal(mode: str, stream: Any) -> bool | None:
    """How to report: True a redrawn line, False plain lines, None nothing."""
    if mode == "lines":
        return False
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return True if mode == "auto" and tty else None


# -- options generated from a dataclass's fields -----------------------------------------
#
# An app's settings (``harmonia.engines.EngineSpec``, ``harmonia.tools.ToolsSpec``) are
# dataclasses whose fields carry their flag and help: every command that
# builds an engine or tools adds the options from the fields, so a new setting is one new
# field and appears, spelled and defaulted alike, in each command.


def option(
    default: Any = MISSING,
    *,
    help: str,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    scope: Sequence[str] = (),
    convert: Callable[[Any], Any] | None = None,
    dest: str | None = None,
    repr: bool = True,
) -> Any:
    """A dataclass field that is also a command-line option (no default: a required one).

    A ``bool`` field is a switch (``flag="--no-x"`` for one that is on by default), a
    ``tuple`` field a repeatable option; ``convert`` turns the parsed value into the
    field's (``from_args`` applies it); ``dest``: where argparse keeps the value when the
    same flag of other commands keeps it under another name than this field's.
    """
    spec = Option(
        help,
        flag,
        None if choices is None else tuple(choices),
        metavar,
        tuple(scope),
        convert=convert,
        dest=dest,
    )
    return field(default=default, metadata={"option": spec}, repr=repr)


def flag_of(cls: type, name: str) -> str:
    """The option string of field ``name`` of an options dataclass."""
    (item,) = [f for f in fields(cls) if f.name == name]
    spec: Option = item.metadata["option"]
    return spec.flag or "--" + name.replace("_", "-")


def flag_words(text: str, names: Mapping[str, str]) -> str:
    """An error about a settings field (``AgentLimits.max_tokens``), said with the flag
    that sets it (``--max-tokens``): a command-line user never wrote the field's name."""
    for internal in sorted(names, key=len, reverse=True):  # max_tokens_x before max_tokens
        text = re.sub(rf"\b{re.escape(internal)}\b", names[internal], text)
    return text


def flags_of(cls: type) -> dict[str, str]:
    """``{"Cls.field": "--flag"}`` for every field of ``cls`` that is a command-line option."""
    return {
        f"{cls.__name__}.{item.name}": flag_of(cls, item.name)
        for item in fields(cls)
        if "option" in item.metadata
    }


def add_options(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    *,
    scope: Collection[str] = (),
    title: str | None = None,
) -> Any:
    """Add an option per field of ``cls`` whose scope meets ``scope`` (every unscoped one);
    the group titled ``title`` they went to (more may join it), else ``parser``.

    The ``dest`` of each option is its field's name, so :func:`from_args` reads them back.
    """
    target = parser.add_argument_group(title) if title is not None else parser
    hints = get_type_hints(cls)
    for item in fields(cls):
        spec = item.metadata.get("option")
        if not isinstance(spec, Option) or (spec.scope and not set(spec.scope) & set(scope)):
            continue
        hint = hints[item.name]
        kind = _value_type(hint)
        words = get_args(hint) if get_origin(hint) is Literal else None
        default = None if item.default is MISSING else item.default
        action = None
        if kind is bool:
            action = "store_false" if default else "store_true"
        elif get_origin(hint) is tuple:  # repeatable; from_args makes the list a tuple
            action, default = "append", list(default or ())
        # A flag named otherwise than its field shows its own name as the metavar.
        metavar = spec.metavar or (spec.flag and spec.flag.lstrip("-").replace("-", "_").upper())
        spec = spec.replace(
            flag=spec.flag or "--" + item.name.replace("_", "-"),
            metavar=None if kind is bool or spec.choices or words else metavar,
            action=action,
            choices=spec.choices or words,
            type=kind if kind in (int, float) else None,
            required=item.default is MISSING,
        )
        _add(target, spec, default=default, dest=spec.dest or item.name)
    return target


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    """An options dataclass from parsed arguments (fields a command lacks keep their default)."""
    values = {}
    for item in fields(cls):  # type: ignore[arg-type]
        spec = item.metadata.get("option")
        dest = spec.dest if spec and spec.dest else item.name
        if not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        value = tuple(value) if isinstance(value, list) else value
        values[item.name] = spec.convert(value) if spec and spec.convert else value
    return cls(**values)


def _value_type(hint: Any) -> type:
    """``float`` for ``float | None``; ``str`` for a ``Literal`` of words."""
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) is Literal:
        return str
    if args and hint is not bool and get_origin(hint) is not None:
        return _value_type(args[0])
    return hint if isinstance(hint, type) else str
