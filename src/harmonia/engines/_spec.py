"""What an engine is built from: :class:`EngineSpec`, the settings ``chat`` and ``serve`` share.

Each field is also a command-line option (``harmonia._options.add_options``), so
``harmonia chat`` and ``harmonia serve`` spell, document and default every engine
flag alike, and a new setting is one new field here. Optional dependencies
(torch, httpx) are imported only by :meth:`EngineSpec.build`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from .. import InputError
from .._files import read_text_file
from .._options import flag_of, option
from ..vocabulary import (
    ANALYSIS,
    ASSISTANT,
    CHANNEL_TEXT,
    END_TEXT,
    FINAL,
    MESSAGE_TEXT,
    RETURN_TEXT,
    START_TEXT,
)
from ._base import Constraint, Engine, UnsupportedConstraintError
from ._generation import Generation
from .scripted import Script, ScriptedEngine

if TYPE_CHECKING:
    from .. import HarmonyEncoding

EngineKind = Literal["scripted", "random", "transformers", "vllm", "llama.cpp"]

#: What ``--engine scripted`` replays without ``--script``: a demo, not a model.
DEMO_REPLY = (
    f"{CHANNEL_TEXT}{ANALYSIS}{MESSAGE_TEXT}A scripted engine: there is no model behind it."
    f"{END_TEXT}{START_TEXT}{ASSISTANT}{CHANNEL_TEXT}{FINAL}{MESSAGE_TEXT}"
    f"Hello from harmonia's scripted engine.{RETURN_TEXT}"
)

#: Where each HTTP engine's server listens unless told otherwise: named in the
#: refusal, never assumed (``harmonia serve`` itself listens on 8000 by default, so a
#: guessed vLLM address could be the server's own).
USUAL_URLS = {"vllm": "http://127.0.0.1:8000", "llama.cpp": "http://127.0.0.1:8080"}


#: Flags only some engines read (a server's address, a replay script).
_ENGINE_ONLY: Final = {"url": ("vllm", "llama.cpp"), "script": ("scripted",)}


@dataclass(frozen=True)
class EngineSpec:
    """One engine's settings; :meth:`build` makes it.

    >>> EngineSpec("vllm", url="http://127.0.0.1:8001").describe()
    'vLLM engine at http://127.0.0.1:8001'
    """

    engine: EngineKind = option(
        help="what samples the tokens: random is a tiny gpt-oss with random weights and the "
        "real vocabulary (needs torch and transformers), scripted replays completions"
    )
    url: str | None = option(
        None,
        help="vllm, llama.cpp: the engine server's base URL (required: vLLM usually listens "
        "on http://127.0.0.1:8000, llama-server on :8080)",
    )
    engine_model: str | None = option(
        None,
        help="transformers: a model folder or hub id (required); vllm: the model name its "
        "server serves (default: the one it lists)",
        metavar="NAME|DIR",
    )
    engine_api_key_env: str | None = option(
        None,
        help="vllm, llama.cpp: the environment variable that holds the engine server's API "
        "key (default: VLLM_API_KEY, LLAMA_API_KEY)",
        metavar="VAR",
    )
    device: str = option("cpu", help="transformers: cpu, cuda, ...")
    dtype: str = option("float32", help="transformers: float32, bfloat16, ...")
    llguidance: str = option(
        "1.7",
        help="vllm: the llguidance version its server runs (vLLM 0.32/0.33: 1.7)",
        metavar="VERSION",
    )
    json_args: Literal["schema", "any", "refuse"] = option(
        "schema",
        help="llama.cpp: compile JSON schemas to GBNF (refusing what it cannot hold), "
        "enforce JSON syntax only, or refuse every schema",
    )
    script: str | None = option(
        None,
        help="scripted: a JSON list of completions to replay in turn, round and round: texts, "
        'or {"text": ..., "delay": seconds per token} (default: a demo reply)',
        metavar="FILE",
    )
    script_delay: float = option(
        0.0,
        help="scripted: seconds per token of a completion that names no delay (default: 0)",
        metavar="SECONDS",
    )

    def build(self, encoding: HarmonyEncoding | None = None) -> Engine:
        """The engine (its optional dependencies imported only now)."""
        kind = self.engine
        for name, engines in _ENGINE_ONLY.items():
            # A flag the chosen engine never reads is a mistake, not a no-op: the
            # user meant another engine, or a flag of this one.
            if getattr(self, name) is not None and kind not in engines:
                raise InputError(
                    f"{flag_of(EngineSpec, name)} is for --engine {' or '.join(engines)}, "
                    f"not --engine {kind}: leave it out, or choose that engine"
                )
        if kind == "scripted":
            return _Replay(self._scripts(encoding))
        if kind == "random":
            return random_engine()
        if kind == "transformers":
            if not self.engine_model:
                raise InputError(
                    f"--engine transformers needs {flag_of(EngineSpec, 'engine_model')} "
                    "(a model folder or hub id)"
                )
            from .transformers import TransformersEngine

            return TransformersEngine.from_pretrained(
                self.engine_model, device=self.device, dtype=self.dtype
            )
        if not self.url:
            raise InputError(
                f"--engine {kind} needs --url, the engine server's base URL (it usually "
                f"listens on {USUAL_URLS[kind]})"
            )
        keys: dict[str, Any] = {}
        if self.engine_api_key_env is not None:
            keys["api_key_env"] = self.engine_api_key_env
        if kind == "vllm":
            from .vllm import VLLMEngine

            return VLLMEngine(self.url, model=self.engine_model, llguidance=self.llguidance, **keys)
        from .llamacpp import LlamaCppEngine

        return LlamaCppEngine(self.url, json_args=self.json_args, **keys)

    def describe(self) -> str:
        """One line that says what :meth:`build` makes (a chat's banner)."""
        if self.engine == "scripted":
            where = self.script or "a demo reply"
            return (
                f"scripted engine: replaying {where}; the model's words are replayed, "
                "the tools are real"
            )
        if self.engine == "random":
            return (
                "random engine: a tiny gpt-oss with random weights and the real vocabulary "
                "(no download); its words mean nothing, its turns are well formed"
            )
        if self.engine == "transformers":
            return f"transformers engine: {self.engine_model} on {self.device}"
        return f"{'vLLM' if self.engine == 'vllm' else 'llama.cpp'} engine at {self.url}"

    def _scripts(self, encoding: HarmonyEncoding | None) -> list[Script]:
        if encoding is None:
            from .. import HarmonyEncodingName, load_harmony_encoding

            encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        raw: Any = [DEMO_REPLY]
        if self.script is not None:
            path = Path(self.script)
            try:
                raw = json.loads(read_text_file(path))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: not JSON ({exc})") from None
        scripts = []
        for item in raw if isinstance(raw, list) and raw else [None]:
            text, delay = (item, self.script_delay) if isinstance(item, str) else _item(item)
            if text is None:
                raise InputError(
                    f"{self.script}: expected a JSON list of completions, one per model step: "
                    'texts such as "<|channel|>final<|message|>Hi!<|return|>", or '
                    '{"text": ..., "delay": 0.02}'
                )
            tokens = tuple(encoding.encode(text, allowed_special="all"))
            scripts.append(Script(tokens, delay=delay))
        return scripts


def _item(item: object) -> tuple[str | None, float]:
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        delay = item.get("delay", 0.0)
        if isinstance(delay, (int, float)) and delay >= 0:
            return item["text"], float(delay)
    return None, 0.0


def random_engine(seed: int = 0) -> Engine:
    """The tiny random-weight gpt-oss of the tests (real vocabulary, no download).

    It says nothing sensible, but runs the real decode path; a harmony constraint
    keeps its turns well formed. Needs torch and transformers.
    """
    from .transformers import TransformersEngine, random_gpt_oss

    return TransformersEngine(random_gpt_oss(seed=seed))


class _Replay(ScriptedEngine):
    """``--engine scripted``: the completions in turn, round and round.

    A request whose constraint (``tool_choice="required"``, a strict
    ``json_schema``) the next completion does not meet is refused before anything
    runs, saying so (the completion is not used up): a demo engine cannot write
    what it was not given.
    """

    def __init__(self, scripts: list[Script]) -> None:
        self.replies = scripts
        self.count = 0
        super().__init__(self._next)

    def _next(self, prompt: tuple[int, ...]) -> Script:
        self.count += 1
        return self.replies[(self.count - 1) % len(self.replies)]

    def generate(
        self, prompt: Sequence[int], params: Any = None, *, constraint: Constraint | None = None
    ) -> Generation:
        if constraint is not None:
            script = self.replies[self.count % len(self.replies)]
            matcher = constraint.new_matcher()
            for token in script.tokens:
                try:
                    matcher.consume(token)
                except Exception as exc:
                    raise UnsupportedConstraintError(
                        "the scripted engine's next reply does not meet this request's "
                        f"constraint (tool_choice, strict schema): {exc}; give it replies "
                        "that do (--script)",
                        engine=self.name,
                    ) from None
        return super().generate(prompt, params, constraint=constraint)
