"""``harmonia chat``: a terminal chat with gpt-oss over any engine, with tools.

:func:`add_subcommand` registers ``chat`` on the ``harmonia`` command's
subparsers (its handler takes ``(args, out)`` and returns the exit status);
:func:`main` runs it alone (``python -m harmonia.agent``). Exit status: 0 when
the last run ended in an answer (or the session was left), 1 when harmonia
refused the input, a file could not be read or written, or a run failed, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from harmonia import (
    Conversation,
    HarmonyEncodingName,
    HarmonyError,
    InputError,
    Message,
    Role,
    load_harmony_encoding,
)
from harmonia._files import check_output_file, parse_json, read_text_file, refuse_same, write_text
from harmonia._options import (
    COLOR,
    Commands,
    add_flags,
    add_options,
    cot_policy,
    flag,
    flag_words,
    flags_of,
    force,
    from_args,
    run_command,
    use_color,
)
from harmonia.engines import EngineSpec, SamplingParams
from harmonia.openai_compat._detect import FORMAT_NAMES, detect_format, load_conversation
from harmonia.tools import ToolsSpec
from harmonia.tools._spec import CHAT_SCOPE
from harmonia.vocabulary import DEFAULT_COT_POLICY

from ._agent import Agent
from ._chat_ui import TerminalView
from ._conversation import new_conversation
from ._events import AgentResult, StopReason
from ._limits import DEFAULT_MAX_TOKENS, AgentLimits

_EXIT_WORDS = ("/exit", "/quit")

#: Sampled tokens per answer of ``--engine random`` unless ``--max-tokens`` says more:
#: its words mean nothing, and a CPU samples a few dozen a second.
RANDOM_MAX_TOKENS = 200


_EXAMPLES = """examples:
  harmonia chat --engine vllm --url http://127.0.0.1:8000 --browser docs/ --python
  harmonia chat --engine llama.cpp --url http://127.0.0.1:8080 --prompt "Hi" --json
  harmonia chat --engine transformers --engine-model ./gpt-oss-20b --device cuda
  harmonia chat --engine random --prompt "Hi"   no model: random weights, real format

exit status: 0 success; 1 an input or the engine failed (one line says what to check);
2 a usage error; 130 interrupted (Ctrl-C at the prompt; during an answer it stops the answer)"""


def add_subcommand(commands: Commands) -> argparse.ArgumentParser:
    """Add ``chat`` to a command's :class:`~harmonia._options.Commands`."""
    chat = commands.add(
        "chat",
        "chat with gpt-oss in the terminal, with tools",
        _cmd_chat,
        description="Chat with gpt-oss over an engine; tools run locally as the model calls them.",
        epilog=_EXAMPLES,
    )
    _arguments(chat)
    return chat


def _arguments(p: argparse.ArgumentParser) -> None:
    engine = add_options(p, EngineSpec, title="engine")
    add_flags(
        engine,
        flag("--constrain", "constrain sampling to valid harmony turns", action="store_true"),
    )
    add_options(p, ToolsSpec, scope=CHAT_SCOPE, title="tools")
    add_flags(
        p,
        flag("--prompt", "one message, one answer, then exit"),
        flag("--json", "with --prompt: print the run as JSON", action="store_true"),
        flag("--instructions", "developer instructions"),
        flag(
            "--reasoning-effort",
            "the system message's reasoning effort (default: medium)",
            choices=("low", "medium", "high"),
        ),
        flag("--reasoning", "show reasoning dimmed", choices=("show", "hide"), default="show"),
        flag(
            "--load",
            "continue a conversation: harmony JSON (as --save writes it) or a Chat "
            "Completions request (read as harmonia render reads it)",
            metavar="FILE",
        ),
        cot_policy(
            default=DEFAULT_COT_POLICY,
            help="which earlier reasoning each step's prompt keeps (as serve's)",
        ),
        flag(
            "--save",
            "save the conversation after each answer (an existing file only with --force, "
            "or when it is the --load file)",
            metavar="FILE",
        ),
        force("the --save file"),
        COLOR.replace(help="colour the output (auto: when stdout is a terminal)"),
        title="conversation",
    )
    limits = add_options(p, AgentLimits, title="limits")
    add_flags(
        limits,
        flag("--temperature", "sampling", type=float, default=SamplingParams().temperature),
    )


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Run ``harmonia chat`` with ``argv``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="harmonia chat", description="Chat with gpt-oss.")
    _arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (already printed)
        return int(exc.code or 0)
    args.func = _cmd_chat
    return run_command(args, stdout if stdout is not None else sys.stdout, "harmonia chat")


def _cmd_chat(args: argparse.Namespace, out: TextIO) -> int:
    if args.json and not args.prompt:
        print("harmonia chat: --json needs --prompt (one message, one answer)", file=sys.stderr)
        return 2
    # Failures end as every command's do (run_command); an error names the flags that set
    # what it names.
    try:
        _check_flags(args)
        return asyncio.run(_session(args, out))
    except HarmonyError as exc:
        raise InputError(flag_words(str(exc), _FLAG_NAMES)) from None
    except KeyboardInterrupt:  # Ctrl-C at the prompt leaves the chat, off the prompt's line
        print(file=out)
        raise


#: The settings an error may name, as the flags that set them.
_FLAG_NAMES = {
    **flags_of(EngineSpec),
    **flags_of(ToolsSpec),
    **flags_of(AgentLimits),
}


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse, before the engine starts, an output that cannot be
    written (checked before the answer, not after it)."""
    if args.save:
        inputs = {"--script": args.script, "--functions": args.functions}
        refuse_same({"--save": args.save}, inputs)
        same_as_load = args.load and Path(args.load).resolve() == Path(args.save).resolve()
        check_output_file(args.save, args.force or bool(same_as_load))


async def _session(args: argparse.Namespace, out: TextIO) -> int:
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    box = from_args(ToolsSpec, args).build()
    spec = from_args(EngineSpec, args)
    engine, banner = spec.build(enc), spec.describe()
    max_tokens = args.max_tokens
    if args.engine == "random" and max_tokens == DEFAULT_MAX_TOKENS:
        max_tokens = RANDOM_MAX_TOKENS
    agent = Agent(
        engine,
        box,
        encoding=enc,
        params=SamplingParams(temperature=args.temperature),
        limits=AgentLimits(max_steps=args.max_steps, max_tokens=max_tokens),
        # Random weights write well-formed turns only under the harmony constraint.
        constraint=args.constrain or args.engine == "random",
        cot_policy=args.cot_policy,
    )
    if args.load:
        conversation = _load(args.load)
    else:
        conversation = new_conversation(
            toolbox=box, instructions=args.instructions, reasoning_effort=args.reasoning_effort
        )
    view = TerminalView(
        out,
        color=use_color(out, args.color),
        show_reasoning=args.reasoning == "show",
        citations=box.tool("browser"),  # type: ignore[arg-type]  # a BrowserTool
    )
    try:
        if args.prompt is not None:
            conversation = _with_user(conversation, args.prompt)
            if not args.json:
                out.write(view_banner(view, banner))
            result = await _turn(agent, conversation, None if args.json else view)
            _save(args, result.conversation)
            if args.json:
                out.write(json.dumps(_as_json(result), ensure_ascii=False, indent=2) + "\n")
            return 0 if result.stop_reason in (StopReason.FINAL, StopReason.TOOL_CALLS) else 1
        out.write(view_banner(view, banner))
        out.write("Ctrl-C stops an answer; /exit or Ctrl-D leaves.\n")
        out.flush()
        while True:
            line = await _read_line("> ")
            if line is None or line.strip() in _EXIT_WORDS:
                return 0
            if not line.strip():
                continue
            result = await _turn(agent, _with_user(conversation, line), view)
            conversation = result.conversation
            _save(args, conversation)
    finally:
        await agent.aclose()


async def _turn(agent: Agent, conversation: Conversation, view: TerminalView | None) -> AgentResult:
    """One run; Ctrl-C (SIGINT) cancels it and the chat goes on."""
    run = agent.run(conversation)
    loop = asyncio.get_running_loop()
    handled = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # Windows, a thread
        loop.add_signal_handler(signal.SIGINT, run.cancel)
        handled = True
    try:
        async for event in run:
            if view is not None:
                view.show(event)
        return await run.result()
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)


async def _read_line(prompt: str) -> str | None:
    """A line from standard input (off the event loop), or ``None`` at end of input.

    The line is read in a daemon thread of its own, not the loop's executor:
    ``asyncio.run`` waits for its executor's threads before it returns, so a
    Ctrl-C at the prompt would wait for Enter (the thread sits in ``input``).
    """
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str | None] = loop.create_future()

    def deliver(value: str | None, error: BaseException | None) -> None:
        if line.done():  # cancelled by Ctrl-C: nobody waits for this line
            return
        if error is not None:
            line.set_exception(error)
        else:
            line.set_result(value)

    def read() -> None:
        value: str | None = None
        error: BaseException | None = None
        try:
            value = input(prompt)
        except EOFError:
            value = None
        except BaseException as exc:  # handed to the waiting coroutine
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: the chat has left
            loop.call_soon_threadsafe(deliver, value, error)

    threading.Thread(target=read, name="harmonia-chat-prompt", daemon=True).start()
    return await line


def _load(path: str) -> Conversation:
    """The conversation of a ``--load`` file: harmony JSON (as ``--save`` writes it) or a
    Chat Completions request, told apart as ``harmonia render`` does."""
    fix = "; --load takes a conversation (harmony JSON, as --save writes, or a Chat request)"
    data = parse_json(read_text_file(path), path, fix)
    kind, why = detect_format(data)
    if kind == "chat":  # said, as render says it: its system text and tools are kept
        print(f"harmonia chat: read {path} as {FORMAT_NAMES[kind]} ({why})", file=sys.stderr)
    return load_conversation(data, kind)


def _with_user(conversation: Conversation, text: str) -> Conversation:
    user = Message.from_role_and_content(Role.USER, text)
    return Conversation.from_messages([*conversation.messages, user])


def _save(args: argparse.Namespace, conversation: Conversation) -> None:
    if args.save:  # whole or not at all: Ctrl-C mid-write keeps the last save
        write_text(args.save, conversation.to_json() + "\n")


def view_banner(view: TerminalView, banner: str) -> str:
    """The engine line, dimmed like reasoning when colour is on."""
    return (f"\x1b[2m{banner}\x1b[0m" if view.color else banner) + "\n"


def _as_json(result: AgentResult) -> dict[str, Any]:
    """What ``--json`` prints: the run's messages, its answer, why it stopped, the usage."""
    return {
        "answer": result.answer,
        "stop_reason": result.stop_reason.value,
        "usage": {
            "prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens,
            "total_tokens": result.usage.prompt_tokens + result.usage.completion_tokens,
        },
        "steps": result.steps,
        "messages": [m.to_dict() for m in result.messages],
        "tool_calls": [m.to_dict() for m in result.tool_calls],
        "error": None if result.error is None else str(result.error),
        "conversation": result.conversation.to_dict(),
    }
