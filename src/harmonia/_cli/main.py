"""The ``harmonia`` command: render, parse, schema and inspect, JSON in and out.

Every command is testable through :func:`main`, which takes ``argv`` and
returns the exit status: 0 on success, 1 when harmonia refuses the input (a
:class:`HarmonyError`, printed to stderr), 2 for a usage or file error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .._content import ToolDescription, ToolNamespaceConfig
from .._encoding import HarmonyEncoding, load_harmony_encoding
from .._enums import HarmonyEncodingName, Role
from .._errors import HarmonyError, InputError
from .._message import DEFAULT_TYPESCRIPT_MODE, RenderConversationConfig
from .._names import COT_POLICY_NAMES, FUNCTIONS, TYPESCRIPT_MODES
from .._parse import parse_completion
from .._render import typescript_converter
from .._render.prompt_text import tools_section
from .inspect import inspect_tokens, render_html, render_terminal
from .io import load_conversation, parse_token_list, read_input, read_json


def _encoding() -> HarmonyEncoding:
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


# -- render ----------------------------------------------------------------------


def _cmd_render(args: argparse.Namespace, out: TextIO) -> int:
    conv = load_conversation(read_json(args.file))
    enc = _encoding()
    config = RenderConversationConfig(cot_policy=args.cot_policy, typescript=args.typescript)
    if args.mode == "completion":
        tokens = enc.render_conversation_for_completion(conv, Role(args.next_role), config)
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
        text = convert(data)
    else:
        raise InputError("expected a JSON Schema object, a tool, or a list of tools")
    out.write(text + "\n")
    return 0


# -- parse and inspect -------------------------------------------------------------


def _read_tokens(args: argparse.Namespace, enc: HarmonyEncoding) -> list[int]:
    """Token ids from a JSON list / whitespace-separated ids, or text with special tokens."""
    text = read_input(args.file)
    tokens = None if args.text else parse_token_list(text)
    if tokens is None:
        if args.ids:
            raise InputError("input is not a list of token ids")
        tokens = enc.encode(
            text.removesuffix("\n") if args.file == "-" else text, allowed_special="all"
        )
    return tokens


def _role(value: str) -> Role | None:
    return None if value == "none" else Role(value)


def _cmd_parse(args: argparse.Namespace, out: TextIO) -> int:
    enc = _encoding()
    tokens = _read_tokens(args, enc)
    result = parse_completion(enc, tokens, _role(args.role), strict=not args.lenient)
    payload = {
        "messages": [m.to_dict() for m in result.messages],
        "diagnostics": [
            {
                "kind": d.kind.value,
                "token_index": d.token_index,
                "description": d.description,
                "kept": d.kept,
                "dropped": d.dropped,
                "tokens": list(d.tokens),
            }
            for d in result.diagnostics
        ],
    }
    out.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    return 0


def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    enc = _encoding()
    tokens = _read_tokens(args, enc)
    inspection = inspect_tokens(enc, tokens, _role(args.role))
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_html(inspection, title=f"harmony tokens: {args.file}"))
        out.write(f"wrote {args.html}\n")
        return 0
    colour = args.color == "always" or (args.color == "auto" and out.isatty())
    out.write(render_terminal(inspection, colour=colour, ids=args.show_ids))
    return 0


def _token_input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", help="token ids (JSON list or separated by spaces), or text; - for stdin"
    )
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--ids", action="store_true", help="the input must be token ids")
    kind.add_argument("--text", action="store_true", help="the input is text with special tokens")
    parser.add_argument(
        "--role",
        default="none",
        choices=["none", *(r.value for r in Role)],
        help="the role the prompt ended with (<|start|>ROLE); none: input starts with <|start|>",
    )


# -- argument parsing ------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harmonia", description="Render and parse the harmony format of gpt-oss."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser(
        "render", help="conversation (harmony JSON or a Chat Completions request) -> tokens"
    )
    render.add_argument("file", help="JSON file, or - for standard input")
    render.add_argument("--format", choices=("ids", "text", "json"), default="json")
    render.add_argument(
        "--mode", choices=("completion", "conversation", "training"), default="completion"
    )
    render.add_argument(
        "--next-role", default=Role.ASSISTANT.value, choices=[r.value for r in Role]
    )
    render.add_argument("--cot-policy", choices=COT_POLICY_NAMES, default=None)
    render.add_argument("--typescript", choices=TYPESCRIPT_MODES, default=DEFAULT_TYPESCRIPT_MODE)
    render.set_defaults(func=_cmd_render)

    schema = sub.add_parser("schema", help="JSON Schema or tools -> the TypeScript the model sees")
    schema.add_argument("file", help="JSON file, or - for standard input")
    schema.add_argument("--namespace", default=FUNCTIONS)
    schema.add_argument("--typescript", choices=TYPESCRIPT_MODES, default=DEFAULT_TYPESCRIPT_MODE)
    schema.set_defaults(func=_cmd_schema)

    parse = sub.add_parser("parse", help="completion tokens or text -> messages and diagnostics")
    _token_input_arguments(parse)
    parse.add_argument("--lenient", action="store_true", help="recover instead of failing")
    parse.set_defaults(func=_cmd_parse)

    inspect = sub.add_parser("inspect", help="a readable, coloured view of a token sequence")
    _token_input_arguments(inspect)
    inspect.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page")
    inspect.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    inspect.add_argument("--show-ids", action="store_true", help="print each token's id")
    inspect.set_defaults(func=_cmd_inspect)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    out = stdout if stdout is not None else sys.stdout
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code or 0)
    try:
        return int(args.func(args, out))
    except HarmonyError as exc:
        print(f"harmonia {args.command}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"harmonia {args.command}: {exc}", file=sys.stderr)
        return 2
