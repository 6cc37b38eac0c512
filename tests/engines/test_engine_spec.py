"""``EngineSpec``: one set of engine settings, one ``build()``, for chat and serve alike."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harmonia import HarmonyEncodingName, InputError, load_harmony_encoding
from harmonia.engines import EngineSpec, ScriptedEngine

ENC = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def _text(engine: object, prompt: list[int]) -> str:
    async def one() -> tuple[int, ...]:
        return (await engine.generate(prompt).result()).tokens  # type: ignore[attr-defined]

    return ENC.decode(list(asyncio.run(one())))


@pytest.mark.parametrize("kind", ["vllm", "llama.cpp"])
def test_an_http_engine_needs_its_url_and_names_the_usual_one(kind: str) -> None:
    # On main, chat guessed http://127.0.0.1:8000 for vLLM where serve refused: one rule now.
    with pytest.raises(InputError, match=f"--engine {kind} needs --url.*http://127.0.0.1:80"):
        EngineSpec(kind).build()  # type: ignore[arg-type]


def test_http_engines_get_every_setting() -> None:
    pytest.importorskip("httpx", reason="the HTTP engines need httpx (harmonia[vllm])")
    from harmonia.engines.llamacpp import LlamaCppEngine
    from harmonia.engines.vllm import VLLMEngine

    vllm = EngineSpec("vllm", url="http://127.0.0.1:9", engine_model="m", llguidance="1.8").build()
    assert isinstance(vllm, VLLMEngine) and vllm.model == "m" and vllm.llguidance == "1.8"
    llama = EngineSpec("llama.cpp", url="http://127.0.0.1:9", json_args="any").build()
    assert isinstance(llama, LlamaCppEngine) and llama.json_args == "any"


def test_the_api_key_variable_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("httpx", reason="the HTTP engines need httpx (harmonia[vllm])")
    monkeypatch.setenv("MY_ENGINE_KEY", "sk-engine")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    plain = EngineSpec("vllm", url="http://127.0.0.1:9").build()
    keyed = EngineSpec("vllm", url="http://127.0.0.1:9", engine_api_key_env="MY_ENGINE_KEY")
    assert plain._http._api_key is None  # type: ignore[attr-defined]
    assert keyed.build()._http._api_key == "sk-engine"  # type: ignore[attr-defined]


def test_transformers_needs_a_model_and_says_which_flag() -> None:
    with pytest.raises(InputError, match="--engine transformers needs --engine-model"):
        EngineSpec("transformers").build()


def test_scripted_without_a_script_replays_the_demo_round_and_round() -> None:
    engine = EngineSpec("scripted").build(ENC)
    assert isinstance(engine, ScriptedEngine)
    first, second = _text(engine, [1]), _text(engine, [2])
    assert first == second and "Hello from harmonia's scripted engine." in first


def test_a_script_holds_texts_or_texts_with_a_delay(tmp_path: Path) -> None:
    path = tmp_path / "replies.json"
    replies = ["<|channel|>final<|message|>one<|return|>"]
    replies.append({"text": "<|channel|>final<|message|>two<|return|>", "delay": 0.5})  # type: ignore[arg-type]
    path.write_text(json.dumps(replies), encoding="utf-8")
    engine = EngineSpec("scripted", script=str(path), script_delay=0.25).build(ENC)
    assert [s.delay for s in engine.replies] == [0.25, 0.5]  # type: ignore[attr-defined]
    texts = [_text(engine, [n]) for n in range(3)]
    assert [t.split("<|message|>")[1][:3] for t in texts] == ["one", "two", "one"]


@pytest.mark.parametrize("content", ["not json", '{"a": 1}', "[]", '[{"text": 3}]'])
def test_a_bad_script_is_refused_saying_what_to_write(tmp_path: Path, content: str) -> None:
    path = tmp_path / "replies.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match="replies.json"):
        EngineSpec("scripted", script=str(path)).build(ENC)


def test_describe_says_what_build_makes() -> None:
    assert EngineSpec("llama.cpp", url="http://h:1").describe() == "llama.cpp engine at http://h:1"
    assert "demo reply" in EngineSpec("scripted").describe()
    described = EngineSpec("transformers", engine_model="d", device="cuda").describe()
    assert described == "transformers engine: d on cuda"
