"""Every Python example in the README and docs/ runs, and prints what it claims.

Blocks fenced as ``python`` run as they are. A block fenced as ``py`` needs
something the test machine has not got (a model, a vLLM server, an API key, a
folder of your own); it runs too, with a local fake in place of what it needs
(``FAKES`` below: each ``py`` block must match one, or the test fails). A page's
blocks run in order in one namespace, as in a notebook. A comment line directly
after a ``print(...)`` line is that print's expected output (without ``# ``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(python|py)\n(.*?)```", re.S)


def _docs_with_code() -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for doc in DOCS:
        blocks = [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text("utf-8"))]
        if blocks:
            out.append((doc.name, blocks))
    return out


def _expected_output(code: str) -> list[str]:
    lines = code.splitlines()
    expected = []
    for before, line in itertools.pairwise(lines):
        if before.lstrip().startswith("print(") and line.lstrip().startswith("# "):
            expected.append(line.lstrip()[2:])
    return expected


# -- the fakes of the ``py`` blocks ---------------------------------------------------


def _needs(*modules: str) -> Callable[[pytest.MonkeyPatch, dict[str, Any]], str | None]:
    def check(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        return f"needs {', '.join(missing)}" if missing else None

    return check


def _fake_vllm(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    """vLLM's offline API, answering with a fixed well-formed turn (no GPU, no model)."""
    from harmonia import load_harmony_encoding

    reply = load_harmony_encoding("HarmonyGptOss").encode(
        "<|channel|>final<|message|>4<|return|>", allowed_special="all"
    )

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.__dict__.update(kwargs)

    class LLM:
        def __init__(self, model: str, **kwargs: Any) -> None:
            self.model, self.kwargs = model, kwargs

        def generate(self, prompt: Any, params: Any) -> list[Any]:
            assert prompt["prompt_token_ids"] and params.stop_token_ids
            output = types.SimpleNamespace(token_ids=list(reply))
            return [types.SimpleNamespace(outputs=[output])]

    modules = {
        "vllm": types.ModuleType("vllm"),
        "vllm.v1": types.ModuleType("vllm.v1"),
        "vllm.v1.sample": types.ModuleType("vllm.v1.sample"),
        "vllm.v1.sample.logits_processor": types.ModuleType("vllm.v1.sample.logits_processor"),
    }
    modules["vllm"].LLM = LLM  # type: ignore[attr-defined]
    modules["vllm"].SamplingParams = SamplingParams  # type: ignore[attr-defined]
    modules["vllm.v1.sample.logits_processor"].AdapterLogitsProcessor = type(  # type: ignore[attr-defined]
        "AdapterLogitsProcessor", (), {}
    )
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return None


def _tiny_model(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    """``from_pretrained("openai/gpt-oss-20b", device="cuda")``: the tests' random gpt-oss."""
    missing = _needs("torch", "transformers", "llguidance")(monkeypatch, namespace)
    if missing:
        return missing
    from harmonia.engines.transformers import TransformersEngine, random_gpt_oss

    monkeypatch.setattr(
        TransformersEngine,
        "from_pretrained",
        classmethod(lambda cls, path, **kwargs: cls(random_gpt_oss())),
    )
    return None


def _api_keys(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    """The web backends read their keys when built (and call nothing until searched)."""
    monkeypatch.setenv("EXA_API_KEY", "test-key")
    monkeypatch.setenv("YDC_API_KEY", "test-key")
    return _needs("httpx")(monkeypatch, namespace)


def _notes_folder(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    notes = Path("notes")  # the test runs in an empty directory
    notes.mkdir(exist_ok=True)
    (notes / "moon.md").write_text("# The Moon\n\nA lunar day.\n", encoding="utf-8")
    from harmonia.tools.browser import LocalCorpusBackend

    namespace.setdefault("LocalCorpusBackend", LocalCorpusBackend)
    return None


def _protocol_names(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    """An interface written out: the names its annotations use."""
    from typing import Protocol

    from harmonia.tools.browser import Page, SearchResult

    namespace.update(Protocol=Protocol, Page=Page, SearchResult=SearchResult)
    return None


def _http_engine(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str | None:
    """An engine built on a server's URL connects on its first request, not before."""
    return _needs("httpx")(monkeypatch, namespace)


#: What each ``py`` block needs, found by a piece of its text, and its fake.
#: What a fake returns for a block a test of its own runs end to end against a
#: live server: here it is only compiled.
ELSEWHERE = "run by tests/serve/test_serve_third_party.py"


def _third_party_client(monkeypatch: pytest.MonkeyPatch, namespace: dict[str, Any]) -> str:
    """A client's configuration pointed at `harmonia serve`: the third-party suite runs it."""
    return ELSEWHERE


FAKES: dict[str, Callable[[pytest.MonkeyPatch, dict[str, Any]], str | None]] = {
    "from vllm import": _fake_vllm,
    "TransformersEngine.from_pretrained(": _tiny_model,
    "ExaBackend()": _api_keys,
    "from agents import Agent": _third_party_client,
    "from langchain_openai import ChatOpenAI": _third_party_client,
    "import litellm": _third_party_client,
    "ExaBackend(converter=": _api_keys,
    'LocalCorpusBackend("notes/"': _notes_folder,
    "class Backend(Protocol)": _protocol_names,
    "import torch": _needs("torch", "transformers", "llguidance"),
    'VLLMEngine("http://127.0.0.1:8000"': _http_engine,
    'LlamaCppEngine("http://127.0.0.1:8080")': _http_engine,
    "HarmonyLogitsProcessor(TurnMatcher": _needs("llguidance", "numpy"),
}


@pytest.mark.parametrize(("doc", "blocks"), _docs_with_code(), ids=lambda v: str(v)[:20])
def test_documented_examples_run(
    doc: str, blocks: list[tuple[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In an empty directory: what an example writes (a store, an index) must not
    # land in the checkout.
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    skipped: list[str] = []
    for index, (fence, code) in enumerate(blocks):
        where = f"{doc}[{index}]"
        if fence == "py":
            fakes = [fake for key, fake in FAKES.items() if key in code]
            assert fakes, f"{where}: a py block says what it needs (add it to FAKES)"
            reasons = [r for fake in fakes if (r := fake(monkeypatch, namespace)) is not None]
            if ELSEWHERE in reasons:  # run end to end by its own test: compiled here
                compile(code, where, "exec")
                continue
            if reasons:
                skipped.append(f"{where} {'; '.join(reasons)}")
                continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, where, "exec"), namespace)
        expected = _expected_output(code)
        if expected and fence == "python":
            assert out.getvalue().splitlines()[-len(expected) :] == expected, where
    if skipped:
        pytest.skip("the other blocks ran; " + ", ".join(skipped))
