"""``harmonia tools browser search|open|find`` and ``harmonia tools python``, from a shell.

Each command builds the tool as an agent would, makes one call and prints the
reply the model would read; a reply that reports a failure goes to stderr and
exits 1. Every run is a fresh session: ``find`` opens its ``--url`` first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TextIO

from .._options import Commands, add_flags, add_options, flag, from_args
from ._base import Tool, ToolCall, ToolOutput
from ._spec import BROWSER_SCOPE, PYTHON_SCOPE, ToolsSpec


def add_commands(tools_sub: Commands) -> None:
    """Add ``browser`` and ``python`` to ``harmonia tools``'s subcommands."""
    examples = (
        "examples:\n"
        "  harmonia tools browser search 'lunar day' --browser examples/corpus/\n"
        "  harmonia tools browser open tides.md --browser examples/corpus/ --loc 10\n"
        "  harmonia tools browser find moon --url tides.md --browser examples/corpus/\n"
        "  harmonia tools browser search 'gpt-oss' --browser exa    # EXA_API_KEY\n\n"
        "exit status: 0 success; 1 the call failed (one line on stderr says why); "
        "2 a usage error"
    )
    browser = tools_sub.add(
        "browser",
        "one browser call: search, open or find, over a folder or the web",
        description="One call of the built-in browser tool; prints what the model would read.",
        epilog=examples,
    )
    calls = tools_sub.nested(browser, "tools_tool", "the browser function", metavar="CALL")
    search = calls.add("search", "search and show the results page", epilog=examples)
    add_flags(
        search,
        flag("query", "what to search for"),
        flag("--topn", "results to show", type=int, default=10),
    )
    opened = calls.add("open", "open a URL (or a file of the corpus) and show it", epilog=examples)
    add_flags(
        opened,
        flag("url", "a URL, or a corpus file's path"),
        flag("--loc", "the first line to show", type=int, default=-1),
        flag("--num-lines", "lines to show", type=int, default=-1),
    )
    find = calls.add("find", "open --url and show the lines with a pattern", epilog=examples)
    add_flags(
        find,
        flag("pattern", "the text to find (case-insensitive)"),
        flag("--url", "the page to search in", required=True),
    )
    for parser in (search, opened, find):
        add_options(parser, ToolsSpec, scope=BROWSER_SCOPE)
        parser.set_defaults(func=_run_browser)

    python = tools_sub.add(
        "python",
        "run code in the sandboxed python tool and print its reply",
        _run_python,
        description="One call of the built-in python tool (a Jupyter kernel in bubblewrap).",
        epilog=(
            "examples:\n  harmonia tools python 'print(6 * 7)'\n  harmonia tools python - < s.py"
            "\n\nexit status: 0 success; 1 the call failed; 2 a usage error"
        ),
    )
    add_flags(python, flag("code", "Python source; - for standard input"))
    add_options(python, ToolsSpec, scope=PYTHON_SCOPE)


def _run_browser(args: argparse.Namespace, out: TextIO) -> int:
    from .browser import BrowserTool

    spec = from_args(ToolsSpec, args)
    tool = BrowserTool(spec.backend())
    folder = spec.browser if spec.browser not in ("exa", "you") else None
    if getattr(args, "url", None) and "://" not in args.url and folder:
        # A corpus file by its path (relative to the corpus, or to here): its file URL.
        inside = Path(folder) / args.url
        args.url = (inside if inside.exists() else Path(args.url)).resolve().as_uri()
    if args.tools_tool == "search":
        calls = [("search", {"query": args.query, "topn": args.topn})]
    elif args.tools_tool == "open":
        view = {"loc": args.loc, "num_lines": args.num_lines}  # -1: the tool's default
        calls = [("open", {"id": args.url, **{k: v for k, v in view.items() if v >= 0}})]
    else:
        calls = [("open", {"id": args.url}), ("find", {"pattern": args.pattern})]
    steps = [ToolCall(f"browser.{n}", "browser", n, json.dumps(a)) for n, a in calls]
    return _print(asyncio.run(_calls(tool, steps)), args, out)


def _run_python(args: argparse.Namespace, out: TextIO) -> int:
    from .python import PythonTool

    code = sys.stdin.read() if args.code == "-" else args.code
    tool = PythonTool(from_args(ToolsSpec, args).python_config())
    call = ToolCall("python", "python", None, code)
    return _print(asyncio.run(_calls(tool, [call])), args, out)


async def _calls(tool: Tool, calls: list[ToolCall]) -> ToolOutput:
    """The calls in turn, on one tool; the last reply, or the first that failed."""
    from .. import ToolError

    try:
        output = ToolOutput("")
        for call in calls:
            try:
                output = await tool.call(call)
            except ToolError as exc:  # what the model would read, as a failed reply
                return ToolOutput(str(exc), is_error=True)
            if output.is_error:
                return output
        return output
    finally:
        await tool.aclose()


def _print(output: ToolOutput, args: argparse.Namespace, out: TextIO) -> int:
    if output.is_error:
        names = (getattr(args, "tools_command", None), getattr(args, "tools_tool", None))
        words = " ".join(["harmonia tools", *filter(None, names)])
        print(f"{words}: {output.text}", file=sys.stderr)
        return 1
    out.write(output.text.rstrip("\n") + "\n")
    return 0
