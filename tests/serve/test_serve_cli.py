"""``harmonia serve`` as a process: starts on loopback, answers, stops on SIGINT."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from serve_support import free_port, wait_healthy

from harmonia._options import Commands
from harmonia.serve import AgentToolLoop
from harmonia.serve._cli import add_subcommand, build_config, build_tool_loop, main

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_process_serves_and_stops_cleanly(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["<|channel|>final<|message|>From the file.<|return|>"]))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "HARMONIA_API_KEYS": "sk-cli-secret"}
    process = subprocess.Popen(
        [sys.executable, "-m", "harmonia.serve._cli", "--engine", "scripted", "--port",
         str(port), "--store", "memory", "--script", str(script), "--model", "m"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_healthy(port)
        import openai

        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-cli-secret", max_retries=0
        )
        reply = client.responses.create(model="m", input="Hi")
        assert reply.output_text == "From the file."
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert "sk-cli-secret" not in output
    assert "127.0.0.1" in output


def test_defaults_and_refusals(capsys):
    parser = argparse.ArgumentParser()
    add_subcommand(Commands(parser))
    args = parser.parse_args(["serve", "--engine", "scripted", "--date", "2026-01-02"])
    config = build_config(args)
    assert config.host == "127.0.0.1" and config.cors_origins == ()
    assert config.prompt_options_now().conversation_start_date == "2026-01-02"
    assert config.store == "memory"  # nothing written into the folder it was started from
    for given, expected in (([], "today"), (["--date", "none"], None)):
        args = parser.parse_args(["serve", "--engine", "scripted", *given])
        assert build_config(args).current_date == expected
    assert main(["--engine", "vllm"]) == 1
    assert "--url" in capsys.readouterr().err


def test_every_server_flag_reaches_the_config():
    parser = argparse.ArgumentParser()
    add_subcommand(Commands(parser))
    given = ["--send-timeout", "7", "--ping-interval", "3", "--cancel-wait", "2",
             "--reasoning-field", "reasoning", "--max-output-tokens", "5", "--queue-size", "4",
             "--cot-policy", "keep_all", "--alias", "x", "--no-warmup", "--store", "none",
             "--max-concurrent", "9", "--memory-store-size", "8", "--model", "m", "--port", "1",
             "--max-body-bytes", "99", "--max-input-tokens", "98", "--host", "::1",
             "--shutdown-timeout", "6"]  # fmt: skip
    config = build_config(parser.parse_args(["serve", "--engine", "scripted", *given]))
    assert (config.send_timeout_s, config.ping_interval_s, config.cancel_wait_s) == (7, 3, 2)
    assert (config.chat_reasoning_field, config.max_output_tokens) == ("reasoning", 5)
    assert (config.queue_size, config.max_concurrent, config.memory_store_size) == (4, 9, 8)
    assert (config.cot_policy, config.model_names, config.warmup) == ("keep_all", ("m", "x"), False)
    assert (config.store, config.port, config.host) == ("none", 1, "::1")
    assert (config.max_body_bytes, config.max_input_tokens) == (99, 98)
    assert config.shutdown_timeout_s == 6


def test_builtin_tool_options(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    serve = add_subcommand(Commands(parser))
    for option in ("--browser", "--python"):
        (action,) = [a for a in serve._actions if option in a.option_strings]
        assert action.help and "default" in action.help
    args = parser.parse_args(["serve", "--engine", "scripted"])
    assert build_tool_loop(args) == (None, None)  # no built-in tools unless asked
    (tmp_path / "a.md").write_text("# A\n\nalpha\n")
    args = parser.parse_args(
        ["serve", "--engine", "scripted", "--browser", str(tmp_path), "--python"]
    )
    loop, backend = build_tool_loop(args)
    assert isinstance(loop, AgentToolLoop) and loop.python and loop.browser is backend
    assert backend is not None
    backend.close()
    assert main(["--engine", "scripted", "--browser", str(tmp_path / "missing")]) == 1
    assert "not a folder" in capsys.readouterr().err
