"""Build the tiny random-weight gpt-oss the live suite serves, into the live cache.

A ``GptOssConfig`` with the real 201,088-id vocabulary and a few tiny layers, random weights
(seeded) with one fixed preference added (below), saved with transformers, and a
``tokenizer.json`` made offline from the o200k_base ranks (harmonia writes the ``.tiktoken``
file) plus the harmony special tokens at their fixed ids. With ``--gguf CONVERTER``, also
the GGUF for llama.cpp, made by llama.cpp's own ``convert_hf_to_gguf.py``. Everything is
reused when present, so a second run is instant.

    python tools/live/build_model.py [--cache DIR] [--gguf PATH/convert_hf_to_gguf.py]

The cache defaults to ``$HARMONIA_LIVE_CACHE`` or ``~/.cache/harmonia-live``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: Bump when the recipe below changes: the cache folder is named after it.
RECIPE = "tiny-gpt-oss-v3"
VOCAB = 201_088
FIRST_SPECIAL = 199_998


def cache_dir(explicit: str | None) -> Path:
    root = explicit or os.environ.get("HARMONIA_LIVE_CACHE") or "~/.cache/harmonia-live"
    return Path(root).expanduser()


def write_tiktoken(folder: Path) -> Path:
    from harmonia._tokenizer import write_tiktoken_file

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "o200k_base.tiktoken"
    if not path.exists():
        tmp = folder / "tmp"
        tmp.mkdir(exist_ok=True)
        os.replace(write_tiktoken_file(tmp), path)
        tmp.rmdir()
    return path


def special_names() -> list[str]:
    from harmonia._tokenizer.special_tokens import SPECIAL_TOKEN_TEXT

    return [SPECIAL_TOKEN_TEXT[i] for i in range(FIRST_SPECIAL, VOCAB)]


def write_tokenizer(model_dir: Path, tiktoken_path: Path) -> None:
    target = model_dir / "tokenizer.json"
    if target.exists():
        return
    shared = tiktoken_path.parent.parent / "tokenizer"  # reused across model recipes
    if (shared / "tokenizer.json").exists():
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(shared / name, model_dir / name)
        return
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from harmonia._tokenizer.engines import O200K_PATTERN

    started = time.monotonic()
    names = special_names()
    converter = TikTokenConverter(
        vocab_file=str(tiktoken_path), pattern=O200K_PATTERN, extra_special_tokens=names
    )
    tokenizer = converter.converted()
    for expected, name in enumerate(names, FIRST_SPECIAL):
        got = tokenizer.token_to_id(name)
        if got != expected:
            raise SystemExit(f"special token {name} got id {got}, expected {expected}")
    shared.mkdir(parents=True, exist_ok=True)
    tmp = shared / "tokenizer.json.tmp"
    tokenizer.save(str(tmp))
    os.replace(tmp, shared / "tokenizer.json")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "bos_token": "<|startoftext|>",
        "eos_token": "<|return|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
    }
    (shared / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(shared / name, model_dir / name)
    print(f"tokenizer.json built in {time.monotonic() - started:.0f} s", flush=True)


#: Logit offset of the ids that are whitespace only (see _prefer_endings).
WHITESPACE_OFFSET = -12.0
#: Logit offsets of the ids that end a message or a turn (see _prefer_endings).
PREFERRED = {200_007: 11.2, 200_002: 9.6, 200_012: 9.6}  # <|end|>, <|return|>, <|call|>


def _prefer_endings(model: object, torch: object) -> None:
    """Make the random model end messages now and then, as a trained one does.

    Random weights spread the next id almost evenly over 201,088 ids, so a turn under a
    grammar (which allows free text in analysis messages) would practically never end.
    One hidden dimension of every token embedding is set to a constant that dominates
    the residual stream, so after the final norm it is a constant input: the output head's
    weights on it act as a bias. Only the ids in PREFERRED get one (``<|end|>``: about
    a 15% chance per step in free text; ``<|return|>`` and ``<|call|>``: about 4% each),
    and the ids that are whitespace only a negative one: there are hundreds of them, so
    between two JSON tokens a random model would otherwise write whitespace up to the
    grammar's bound every time.
    """
    with torch.no_grad():  # type: ignore[attr-defined]
        embed = model.model.embed_tokens.weight  # type: ignore[attr-defined]
        head = model.lm_head.weight  # type: ignore[attr-defined]
        embed[:, 0] = 1.0
        head[:, 0] = 0.0
        scale = float(embed.shape[1]) ** 0.5  # the normalised constant: sqrt(hidden)
        from harmonia._tokenizer import get_tokenizer

        table = get_tokenizer().token_bytes_table
        for token in range(FIRST_SPECIAL):
            if table[token].strip(b" \t\r\n") == b"":
                head[token, 0] = WHITESPACE_OFFSET / scale
        for token, offset in PREFERRED.items():
            head[token, 0] = offset / scale


def write_model(model_dir: Path) -> None:
    if (model_dir / "config.json").exists() and (model_dir / "model.safetensors").exists():
        return
    import torch
    from transformers import GenerationConfig, GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=64,
        head_dim=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_hidden_layers=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
        sliding_window=128,
        bos_token_id=199_998,
        eos_token_id=200_002,
        pad_token_id=199_999,
    )
    model = GptOssForCausalLM(config).to(torch.float32)
    _prefer_endings(model, torch)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    GenerationConfig(
        bos_token_id=199_998, eos_token_id=[200_002, 199_999, 200_012], pad_token_id=199_999
    ).save_pretrained(str(model_dir))
    print(f"model saved: {sum(p.numel() for p in model.parameters())} parameters", flush=True)


def write_gguf(root: Path, model_dir: Path, converter: Path) -> Path:
    target = root / "model-f32.gguf"
    if target.exists():
        return target
    env = dict(os.environ)
    gguf_py = converter.parent / "gguf-py"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(gguf_py), env.get("PYTHONPATH")]))
    tmp = root / "model-f32.gguf.tmp"
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(converter), str(model_dir), "--outtype", "f32", "--outfile", str(tmp)],
        check=True,
        env=env,
    )
    os.replace(tmp, target)
    print(f"GGUF converted in {time.monotonic() - started:.0f} s", flush=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", help="cache folder (default $HARMONIA_LIVE_CACHE)")
    parser.add_argument("--gguf", type=Path, help="llama.cpp's convert_hf_to_gguf.py")
    args = parser.parse_args()
    root = cache_dir(args.cache) / RECIPE
    model_dir = root / "hf"
    model_dir.mkdir(parents=True, exist_ok=True)
    tiktoken_path = write_tiktoken(cache_dir(args.cache) / "tiktoken")
    write_tokenizer(model_dir, tiktoken_path)
    write_model(model_dir)
    if args.gguf is not None:
        write_gguf(root, model_dir, args.gguf)
    print(f"model ready: {root}")


if __name__ == "__main__":
    main()
