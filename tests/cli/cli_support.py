"""What the CLI tests share: the parsers of every command, walked from ``_build_parser``.

A plain module (imported as ``cli_support``: pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import argparse

from harmonia._cli.main import _build_parser


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser, by its words (``"tools browser search"``); the
    top-level parser is ``""``."""
    out: dict[str, argparse.ArgumentParser] = {}
    todo: list[tuple[str, argparse.ArgumentParser]] = [("", _build_parser())]
    while todo:
        words, parser = todo.pop()
        out[words] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{words} {n}".strip(), p) for n, p in action.choices.items()]
    return out


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A parser's actions by each of their option strings (``--engine``)."""
    return {s: a for a in parser._actions for s in a.option_strings}
