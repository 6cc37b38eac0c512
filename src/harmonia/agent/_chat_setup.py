"""What ``harmonia chat`` builds from its options: the engine and the toolbox."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from harmonia import HarmonyEncoding, InputError
from harmonia.engines import Engine, Script, ScriptedEngine
from harmonia.tools import FunctionTool, FunctionTools, Toolbox

#: Where each HTTP engine's server listens unless ``--url`` says otherwise.
DEFAULT_URLS = {"vllm": "http://127.0.0.1:8000", "llama.cpp": "http://127.0.0.1:8080"}
ENGINES = ("vllm", "llama.cpp", "transformers", "scripted", "random")

#: Sampled tokens per answer of ``--engine random`` unless ``--max-tokens`` says more:
#: its words mean nothing, and a CPU samples a few dozen a second.
RANDOM_MAX_TOKENS = 200


def random_engine(seed: int = 0) -> Engine:
    """The tiny random-weight gpt-oss of the tests (real vocabulary, no download).

    It says nothing sensible, but runs the real decode path; a harmony constraint
    keeps its turns well formed. Needs torch and transformers.
    """
    try:
        from harmonia.engines.transformers import TransformersEngine, random_gpt_oss
    except ImportError as exc:  # pragma: no cover - the module imports nothing optional
        raise InputError(f"--engine random needs torch and transformers ({exc})") from None
    return TransformersEngine(random_gpt_oss(seed=seed))


def build_engine(args: argparse.Namespace, enc: HarmonyEncoding) -> tuple[Engine, str]:
    """The engine the options name, and a line that says what it is."""
    kind = args.engine
    if kind == "scripted":
        if not args.script:
            raise InputError("--engine scripted needs --script FILE (a JSON list of completions)")
        completions = _read_script(Path(args.script), enc)
        banner = (
            f"scripted engine: replaying {len(completions)} completion(s) from {args.script}; "
            "the model's words are replayed, the tools are real"
        )
        return ScriptedEngine(completions), banner
    if kind == "random":
        banner = (
            "random engine: a tiny gpt-oss with random weights and the real vocabulary "
            "(no download); its words mean nothing, its turns are well formed"
        )
        return random_engine(), banner
    if kind == "transformers":
        if not args.model:
            raise InputError("--engine transformers needs --model DIR (a gpt-oss checkpoint)")
        from harmonia.engines.transformers import TransformersEngine

        engine = TransformersEngine.from_pretrained(
            args.model, device=args.device, dtype=args.dtype or "float32"
        )
        return engine, f"transformers engine: {args.model} on {args.device}"
    url = args.url or DEFAULT_URLS[kind]
    if kind == "vllm":
        from harmonia.engines.vllm import VLLMEngine

        return VLLMEngine(url, model=args.model), f"vLLM engine at {url}"
    from harmonia.engines.llamacpp import LlamaCppEngine

    return LlamaCppEngine(url), f"llama.cpp engine at {url}"


def _read_script(path: Path, enc: HarmonyEncoding) -> list[Script]:
    """Completions to replay: texts, or ``{"text": ..., "delay": seconds per token}``."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc})") from None
    scripts = []
    for item in raw if isinstance(raw, list) else [None]:
        text, delay = (item, 0.0) if isinstance(item, str) else _script_item(item)
        if text is None:
            raise InputError(
                f"{path}: expected a JSON list of completions, one per model step: texts such as "
                '"<|channel|>final<|message|>Hi!<|return|>", or {"text": ..., "delay": 0.02}'
            )
        scripts.append(Script(tuple(enc.encode(text, allowed_special="all")), delay=delay))
    return scripts


def _script_item(item: object) -> tuple[str | None, float]:
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        delay = item.get("delay", 0.0)
        if isinstance(delay, (int, float)) and delay >= 0:
            return item["text"], float(delay)
    return None, 0.0


def build_toolbox(args: argparse.Namespace) -> tuple[Toolbox, Any]:
    """The toolbox the options ask for, and the browser (for citations), if any."""
    box = Toolbox()
    browser = None
    if args.browser:
        from harmonia.tools._shell import browser_backend
        from harmonia.tools.browser import BrowserTool

        # The same words as serve's --browser: a folder, exa (EXA_API_KEY) or you (YDC_API_KEY).
        if args.browser in ("exa", "you"):
            backend: Any = browser_backend(None, args.browser)
        else:
            folder = Path(args.browser)
            if not folder.is_dir():
                raise InputError(
                    f"--browser {args.browser}: no such folder; give a folder of Markdown, "
                    "text or HTML files, or exa or you for web search"
                )
            backend = browser_backend(str(folder), None)
        browser = BrowserTool(backend)
        box.add(browser)
    if args.python:
        from harmonia.tools.python import PythonTool, sandbox_status

        status = sandbox_status()
        if not status.ok:
            raise InputError(f"--python: the sandbox cannot start here: {status.reason}")
        box.add(PythonTool())
    if args.functions:
        box.add(FunctionTools(load_functions(args.functions)))
    return box, browser


def load_functions(spec: str) -> list[FunctionTool[Any, Any]]:
    """The ``@function_tool`` functions of a module (a dotted name or a ``.py`` file)."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"--functions {spec}: no such file")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise InputError(f"--functions {spec}: cannot load it as a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(path.stem, module)
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(spec)
        except ImportError as exc:
            raise InputError(f"--functions {spec}: cannot import it ({exc})") from None
    found = [v for v in vars(module).values() if isinstance(v, FunctionTool)]
    if not found:
        raise InputError(
            f"--functions {spec}: the module defines no function tools; "
            "decorate them with @harmonia.tools.function_tool"
        )
    return found
