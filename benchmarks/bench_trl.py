"""harmonia's ``hf`` dialect with the ``trl`` policy, side by side with TRL's own way.

TRL's way of tokenizing gpt-oss training data: transformers'
``apply_chat_template`` with TRL's ``gptoss_training.jinja`` (its ``{% generation %}``
blocks) and ``return_assistant_tokens_mask=True``, through ``datasets.map``. The
tokenizer is o200k_harmony built for ``tokenizers`` from harmonia's own vocabulary
(transformers' tiktoken converter; no download), with the format's special tokens
at their ids. Both sides tokenize the same rows in one process; the script checks
that the ids and the masks are identical row for row, then prints rows/s of each
and the ratio (per core: one process each). It also runs ``harmonia data build``
on the rows with ``--workers 1`` and ``2``.

Needs the ``parquet`` extra, ``transformers``, ``tokenizers``, ``datasets`` and
``trl`` (only its template file is read)::

    python benchmarks/bench_trl.py                  # 2,000 rows, ~1 minute
    python benchmarks/bench_trl.py --rows 500       # quick
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from bench_training import SEED, TOOL, spec


def hf_row(s: dict[str, Any]) -> dict[str, Any]:
    """One generated conversation as a Hugging Face ``messages`` row with ``thinking``
    (the form TRL's gpt-oss data uses: calls and results without ids, ``tools`` as
    JSON text, as Arrow-backed datasets keep it)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Answer carefully."}]
    for turn in s["turns"]:
        messages.append({"role": "user", "content": turn["user"]})
        if "call" in turn:
            call = {"name": "get_forecast", "arguments": json.loads(turn["call"])}
            assistant: dict[str, Any] = {"role": "assistant", "tool_calls": [{"function": call}]}
            if turn.get("reasoning"):
                assistant["thinking"] = turn["reasoning"]
            messages.append(assistant)
            messages.append({"role": "tool", "content": turn["result"]})
            final: dict[str, Any] = {"role": "assistant", "content": turn["answer"]}
            if turn.get("after"):
                final["thinking"] = turn["after"]
            messages.append(final)
        else:
            answer: dict[str, Any] = {"role": "assistant", "content": turn["answer"]}
            if turn.get("reasoning"):
                answer["thinking"] = turn["reasoning"]
            messages.append(answer)
    row: dict[str, Any] = {"messages": messages}
    if s["tools"]:
        row["tools"] = json.dumps([{"type": "function", "function": TOOL}])
    return row


def hf_tokenizer() -> Any:
    """o200k_harmony as a transformers fast tokenizer, built from harmonia's vocabulary."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from harmonia._tokenizer import special_tokens as st
    from harmonia._tokenizer.engines import O200K_PATTERN
    from harmonia._tokenizer.vocab_file import ordinary_ranks

    ranks = ordinary_ranks()

    class Converter(TikTokenConverter):  # type: ignore[misc]
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
            return {token: rank for rank, token in enumerate(ranks)}

    tokenizer = Converter(vocab_file="o200k_harmony", pattern=O200K_PATTERN).converted()
    specials = [st.SPECIAL_TOKEN_TEXT[t] for t in range(st.FIRST_SPECIAL, st.N_VOCAB)]
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    assert tokenizer.token_to_id("<|start|>") == st.START  # ids as the format fixes them
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def trl_template() -> str:
    found = importlib.util.find_spec("trl")
    if found is None or found.origin is None:
        raise SystemExit("TRL's template is read from the trl package: pip install --no-deps trl")
    path = Path(found.origin).parent / "chat_templates" / "gptoss_training.jinja"
    return path.read_text("utf-8")


def trl_map(rows: list[dict[str, Any]], tokenizer: Any, template: str) -> tuple[list[Any], float]:
    """TRL's tokenization of ``rows`` through ``datasets.map``: (rows out, seconds)."""
    import datasets

    def tokenize(example: dict[str, Any]) -> dict[str, Any]:
        tools = json.loads(example["tools"]) if example.get("tools") else None
        out = tokenizer.apply_chat_template(
            json.loads(example["messages"]),
            tools=tools,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}

    # Messages as JSON text: Arrow would fill absent keys with nulls, which the
    # template renders (harmonia's docs say the same of reading rows).
    table = {
        "messages": [json.dumps(r["messages"]) for r in rows],
        "tools": [r.get("tools", "") for r in rows],
    }
    ds = datasets.Dataset.from_dict(table)
    started = time.perf_counter()
    mapped = ds.map(tokenize, remove_columns=["messages", "tools"], keep_in_memory=True)
    seconds = time.perf_counter() - started
    return list(zip(mapped["input_ids"], mapped["assistant_masks"], strict=True)), seconds


def harmonia_batch(lines: list[str], date: str) -> tuple[Any, float]:
    from harmonia.training import InputOptions, render_batch

    options = InputOptions(dialect="hf", date=date)
    started = time.perf_counter()
    batch = render_batch(lines, policy="trl", options=options)
    return batch, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(SEED)
    gen = workloads.TextGen(SEED)
    rows = [hf_row(spec(rng, gen)) for _ in range(args.rows)]
    lines = [json.dumps(r) for r in rows]
    date = datetime.now().strftime("%Y-%m-%d")  # the template's strftime_now
    tokenizer, template = hf_tokenizer(), trl_template()

    from harmonia.training._batch import default_encoding

    default_encoding()  # loaded once, as in a build worker
    trl_times, ours_times = [], []
    for k in range(args.repeat):
        # Turns taken in an order that reverses every repetition.
        order = ("trl", "harmonia") if k % 2 == 0 else ("harmonia", "trl")
        for side in order:
            if side == "trl":
                theirs, seconds = trl_map(rows, tokenizer, template)
                trl_times.append(seconds)
            else:
                batch, seconds = harmonia_batch(lines, date)
                ours_times.append(seconds)
    assert batch.stats.rows_ok == len(rows), batch.problems[:3]
    pairs = zip(theirs, batch.input_ids, batch.loss_mask, strict=True)
    same = sum(ids == list(o) and list(mask) == list(m) for (ids, mask), o, m in pairs)
    tokens = batch.stats.tokens
    t_trl, t_ours = statistics.median(trl_times), statistics.median(ours_times)
    print(f"{len(rows)} rows, {tokens} tokens ({tokens / len(rows):.0f} a row), one process each")
    print(f"identical ids and masks: {same} of {len(rows)} rows")
    print(f"  TRL (apply_chat_template via datasets.map): {len(rows) / t_trl:8.0f} rows/s")
    print(f"  harmonia render_batch (hf dialect, trl):    {len(rows) / t_ours:8.0f} rows/s")
    print(f"  per core: {t_trl / t_ours:.1f}x")
    from harmonia.training import BuildOptions, InputOptions, build

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text("\n".join(lines) + "\n")
        for workers in (1, 2):
            started = time.perf_counter()
            build(
                [path],
                Path(tmp) / f"out{workers}",
                policy="trl",
                input_options=InputOptions(dialect="hf", date=date),
                options=BuildOptions(workers=workers, progress="none"),
            )
            seconds = time.perf_counter() - started
            print(f"  harmonia data build --workers {workers}: {len(rows) / seconds:8.0f} rows/s")
    if same != len(rows):
        raise SystemExit("the outputs differ")


if __name__ == "__main__":
    main()
