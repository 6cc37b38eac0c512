"""The ``harmonia`` command: render, parse, schema and inspect, JSON in and out.

Every command is testable through :func:`main`, which takes ``argv`` and
returns the exit status: 0 on success, 1 when harmonia refuses an input (one
line on stderr saying what is wrong, where, and how to fix it), 2 for a usage
error (argparse's message).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

from .._content import ToolDescription, ToolNamespaceConfig
from .._encoding import HarmonyEncoding, load_harmony_encoding
from .._enums import HarmonyEncodingName, Role, StreamState
from .._errors import InputError, ParseError
from .._files import atomic_file, check_output_file, describe, refuse_same
from .._message import DEFAULT_TYPESCRIPT_MODE, RenderConversationConfig
from .._names import FUNCTIONS, TYPESCRIPT_MODES
from .._options import (
    COLOR,
    EXIT_INTERRUPTED,
    PROGRESS,
    Commands,
    add_flags,
    cot_policy,
    flag,
    force,
    progress_on_terminal,
    run_command,
    use_color,
)
from .._parse import parse_completion
from .._render import typescript_converter
from .._render.prompt_text import tools_section
from .._render.schema_check import check_schema
from .._tokenizer.special_tokens import STOP_TOKENS
from ..openai_compat._common import DEFAULT_COT_POLICY
from ..openai_compat._detect import FORMAT_NAMES, detect_format, load_conversation
from .inspect import HUGE_PAGE, PAGE_BYTES_PER_TOKEN, Totals, walk, write_html, write_terminal
from .io import INPUT_FORMATS, read_json
from .tokens import completion_role, progress, read_tokens


def _encoding() -> HarmonyEncoding:
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def _note(args: argparse.Namespace, text: str) -> None:
    print(f"harmonia {args.command}: {text}", file=sys.stderr)


# -- render ----------------------------------------------------------------------


def _cmd_render(args: argparse.Namespace, out: TextIO) -> int:
    if args.next_role is not None and args.mode != "completion":
        raise InputError(
            f"--next-role is the role --mode completion ends with; --mode {args.mode} "
            "ends with the last message: leave --next-role out, or use --mode completion"
        )
    data = read_json(args.file)
    kind = args.input_format
    if kind == "auto":
        kind, why = detect_format(data)
        _note(
            args,
            f"read {describe(args.file)} as {FORMAT_NAMES[kind]} ({why}); "
            "--input-format harmony|chat chooses",
        )
    conv = load_conversation(data, kind)
    enc = _encoding()
    # No default of the CLI's own: a Chat request renders as render_chat_request
    # does, harmony JSON as HarmonyEncoding's render methods do.
    policy = args.cot_policy or (DEFAULT_COT_POLICY if kind == "chat" else None)
    config = RenderConversationConfig(cot_policy=policy, typescript=args.typescript)
    if args.mode == "completion":
        role = Role(args.next_role or Role.ASSISTANT.value)
        tokens = enc.render_conversation_for_completion(conv, role, config)
    elif args.mode == "training":
        tokens = enc.render_conversation_for_training(conv, config)
    else:
        tokens = enc.render_conversation(conv, config)
    if args.format == "ids":
        out.write(json.dumps(tokens) + "\n")
    elif args.format == "text":
        out.write(enc.decode_utf8(tokens) + "\n")
    else:
        payload = {"num_tokens": len(tokens), "tokens": tokens, "text": enc.decode_utf8(tokens)}
        out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    return 0


# -- schema ----------------------------------------------------------------------


def _as_tool(raw: Any, index: int) -> ToolDescription | None:
    """A tool from our shape, OpenAI's ``{"type": "function", "function": ...}``, or None."""
    if not isinstance(raw, dict):
        return None
    if raw.get("type") == "function" and isinstance(raw.get("function"), dict):
        raw = raw["function"]
    if "name" not in raw or not ({"parameters", "description"} & set(raw)):
        return None
    name = raw["name"]
    if not isinstance(name, str):
        raise InputError(f"tool {index}: name must be a string")
    return ToolDescription(name, str(raw.get("description") or ""), raw.get("parameters"))


def _cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    data = read_json(args.file)
    convert = typescript_converter(args.typescript)
    items = data if isinstance(data, list) else [data]
    tools = [_as_tool(item, i) for i, item in enumerate(items)]
    if all(t is not None for t in tools) and tools:
        namespace = ToolNamespaceConfig(args.namespace, None, [t for t in tools if t is not None])
        text = tools_section({namespace.name: namespace}, convert).split("\n\n", 1)[1]
    elif isinstance(data, dict):
        # The renderer's check first: a schema it refuses is not shown as ``any``.
        check_schema(data, "")
        text = convert(data)
    else:
        raise InputError(
            f"{describe(args.file)}: expected a JSON Schema object, a tool, or a list of tools"
        )
    out.write(text + "\n")
    return 0


# -- parse and inspect -------------------------------------------------------------


def _explain(exc: ParseError, enc: HarmonyEncoding) -> str:
    """A strict parse failure as one line: what, which token, and what to try."""
    if exc.token is None:
        where = "at the end of the input"
    else:
        text = f" {exc.token_text!r}" if exc.token_text else ""
        where = f"at token index {exc.token_index} (id {exc.token}{text})"
    hints = []
    vocabulary = len(enc.tokenizer.token_bytes_table)
    if exc.token is not None and not 0 <= exc.token < vocabulary:
        hints.append(f"id {exc.token} is out of range (o200k_harmony ids are 0..{vocabulary - 1})")
    if exc.token_index == 0 and exc.state == StreamState.EXPECT_START.value:
        hints.append("if the input is model output after <|start|>assistant, use --role assistant")
    # The library's advice names its keyword; on the command line it is a flag.
    reason = exc.reason.replace("strict=False", "--lenient")
    if "--lenient" not in reason:
        hints.append("--lenient recovers and lists what it repaired")
    return f"{reason} {where}; {'; '.join(hints)}"


def _cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    enc = _encoding()
    read, _ = read_tokens(args.file, enc, text=args.text, ids=args.ids, strict=not args.lenient)
    role, read = completion_role(args.role, read)
    tokens = list(read)
    if not tokens:
        raise InputError(f"{describe(args.file)} is empty: no tokens to parse")
    try:
        result = parse_completion(enc, tokens, role, strict=not args.lenient)
    except ParseError as exc:
        raise InputError(_explain(exc, enc)) from None
    if not args.lenient and result.messages and tokens and tokens[-1] not in STOP_TOKENS:
        # Strict parsing returns a completion cut off inside a message as it is (as
        # the reference does); say so, since a truncated tool call is not a call.
        last = result.messages[-1]
        what = f"a tool call to {last.recipient}" if last.recipient else "the last message"
        _note(
            args,
            f"the input ends inside a message (no <|end|>, <|call|> or <|return|>): {what} "
            "is truncated; --lenient lists it as a 'truncated' diagnostic",
        )
    payload = {
        "messages": [m.to_dict() for m in result.messages],
        "diagnostics": [
            {**dataclasses.asdict(d), "kind": d.kind.value, "tokens": list(d.tokens)}
            for d in result.diagnostics
        ],
    }
    out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    return 0


def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    if args.html:
        refuse_same({"--html": args.html}, {"the input": args.file})
        check_output_file(args.html, args.force)
    enc = _encoding()
    tokens, expected = read_tokens(args.file, enc, text=args.text, ids=args.ids)
    role, tokens = completion_role(args.role, tokens)
    redraw = progress_on_terminal(args.progress, sys.stderr)
    if redraw is not None:
        tokens = progress(tokens, expected, f"harmonia {args.command}", redraw=redraw)
    totals = Totals()
    events = walk(enc, tokens, role, totals)
    if not args.html:
        write_terminal(events, totals, out, colour=use_color(out, args.color), ids=args.show_ids)
        return 0
    if expected is not None and expected * PAGE_BYTES_PER_TOKEN > HUGE_PAGE:
        _note(
            args,
            f"about {expected:,} tokens: the page will be about "
            f"{expected * PAGE_BYTES_PER_TOKEN / 1e6:,.0f} MB, more than browsers open "
            "comfortably; the terminal view (without --html) or a part of the input reads better",
        )
    with atomic_file(args.html) as f:  # a page appears whole or not at all
        write_html(events, totals, f, title=f"harmony tokens: {args.file}")
    out.write(f"wrote {args.html}\n")
    return 0


def _token_input_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(
        parser,
        flag("file", "token ids (a JSON list, or separated by spaces), or text; - for stdin"),
        flag(
            "--role",
            "the role the prompt ended with (<|start|>ROLE); none: the input has its own "
            "<|start|>; auto: none if a <|start|> comes before the first <|message|>, else "
            "assistant (model output)",
            default="auto",
            choices=["auto", "none", *(r.value for r in Role)],
        ),
    )
    add_flags(
        parser,
        flag("--ids", "the input must be token ids", action="store_true"),
        flag("--text", "the input is text with special tokens", action="store_true"),
        exclusive=True,
    )


# -- argument parsing ------------------------------------------------------------


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's layout and shows each option's default (but not a switch's,
    nor an empty one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.option_strings
            and action.nargs != 0
            and "%(default)" not in text
            and action.default not in (None, [], argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


_EPILOG = """\
examples:
  harmonia render request.json --format text    a Chat request or harmony JSON -> prompt
  harmonia parse completion.txt                  model output -> messages (JSON)
  harmonia inspect completion.ids --html a.html  a page showing every token
  harmonia schema tools.json                     tools -> the TypeScript the model sees

exit status: 0 success; 1 an input was refused (one line on stderr says what,
where and how to fix it); 2 a usage error.
"""


def _version() -> str:
    import harmonia

    return f"harmonia {harmonia.__version__}"


def _build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``chosen``: the command about to run (``None``: every command in full)."""
    parser = argparse.ArgumentParser(
        prog="harmonia",
        description="Render and parse the harmony format of gpt-oss.",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    add_flags(
        parser, flag("--version", "show the version and exit", action="version", version=_version())
    )
    commands = Commands(parser, formatter_class=_HelpFormatter)

    def command(name: str, help: str, run: Any) -> argparse.ArgumentParser:
        return commands.add(name, help, run, epilog=_EPILOG)

    typescript = flag(
        "--typescript",
        "how tool schemas become TypeScript: reference (byte-exact) or corrected",
        choices=TYPESCRIPT_MODES,
        default=DEFAULT_TYPESCRIPT_MODE,
    )
    json_input = flag("file", "JSON file, or - for standard input")
    render = command(
        "render",
        "a conversation (a Chat Completions request or harmony JSON) -> prompt tokens",
        _cmd_render,
    )
    add_flags(
        render,
        json_input,
        flag(
            "--input-format",
            "harmony: Conversation.to_json's shape; chat: an OpenAI Chat Completions "
            "request; auto: decided by format-only fields (a note on stderr says which)",
            choices=INPUT_FORMATS,
            default="auto",
        ),
        flag(
            "--format",
            "output: token ids, prompt text, or both in a JSON object",
            choices=("ids", "text", "json"),
            default="json",
        ),
        flag(
            "--mode",
            "completion: ends with <|start|>NEXT-ROLE; conversation: the messages only; "
            "training: the last message ends with <|return|>",
            choices=("completion", "conversation", "training"),
            default="completion",
        ),
        flag(
            "--next-role",
            f"the role of the message to complete (--mode completion; default: "
            f"{Role.ASSISTANT.value})",
            choices=[r.value for r in Role],
        ),
        cot_policy(
            default=None,
            help=f"which earlier reasoning the model sees (default: {DEFAULT_COT_POLICY} for "
            "a Chat request, as openai_compat.render_chat_request; the reference's rule for "
            "harmony JSON, as HarmonyEncoding's render methods)",
        ),
        typescript,
    )

    schema = command(
        "schema", "a JSON Schema or tools -> the TypeScript the model sees", _cmd_schema
    )
    add_flags(
        schema,
        json_input,
        flag("--namespace", "the namespace of the tools", default=FUNCTIONS),
        typescript.replace(help="reference (byte-exact) or corrected"),
    )

    parse = command(
        "parse", "completion tokens or text -> messages and diagnostics (JSON)", _cmd_parse
    )
    _token_input_arguments(parse)
    add_flags(
        parse, flag("--lenient", "recover from format errors and list them", action="store_true")
    )

    inspect = command("inspect", "a readable, coloured view of a token sequence", _cmd_inspect)
    _token_input_arguments(inspect)
    add_flags(
        inspect,
        flag("--html", "write a self-contained HTML page", metavar="OUT.html"),
        COLOR,
        flag("--show-ids", "print each token's id", action="store_true"),
        PROGRESS,
        force("the --html page"),
    )

    # The apps' commands: each module adds its own and imports its extras only when
    # run. Only the command being run is imported (agent, serve and training take
    # about a second to import); the others get a placeholder with their help line.
    for name, (module, help) in _APPS.items():
        if chosen in (None, name):
            importlib.import_module(module, __package__).add_subcommand(commands)
        else:
            commands.add(name, help, add_help=False)
    _one_spelling(parser)
    return parser


def _one_spelling(parser: argparse.ArgumentParser) -> None:
    """No abbreviated flags in any command: a flag has one spelling, so a removed one
    (``--cot`` for ``--cot-policy``) is a usage error rather than a prefix match."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _one_spelling(child)


#: The apps' commands: the module that adds each, and its line in ``harmonia --help``.
_APPS: Final = {
    "chat": ("..agent._chat_cli", "chat with gpt-oss in the terminal, with tools"),
    "serve": (
        "..serve._cli",
        "an OpenAI-compatible HTTP server (Chat Completions, Responses) over an engine",
    ),
    "tools": ("..tools.mcp._cli", "run harmonia's built-in tools outside an agent loop"),
    "data": ("..training._cli", "training data: validate, build, stats, inspect, pack, export"),
}


def _innermost(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)command parser ``argv`` names: ``harmonia data build`` -> build's."""
    for word in argv:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if commands and word in commands[0].choices:
            parser = commands[0].choices[word]
    return parser


def _chosen_command(argv: Sequence[str]) -> str:
    """The command word of ``argv`` (the first that is not an option), or ``""``."""
    return next((word for word in argv if not word.startswith("-")), "")


def command_words(args: argparse.Namespace) -> str:
    """``harmonia data build``: the words of the command that ran, for its messages."""
    subwords = (
        getattr(args, name, None) for name in ("data_command", "tools_command", "tools_tool")
    )
    return " ".join(["harmonia", args.command, *filter(None, subwords)])


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    words_in = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = _build_parser(_chosen_command(words_in))
        args, extra = parser.parse_known_args(words_in)
        if extra:  # said by the command they were given to, not by "harmonia"
            _innermost(parser, words_in).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse exits on --help, --version and usage errors
        return int(exc.code or 0)
    except KeyboardInterrupt:  # before a command started (while importing)
        print("harmonia: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run_command(args, stdout if stdout is not None else sys.stdout, command_words(args))
