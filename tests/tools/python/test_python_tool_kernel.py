"""The kernel's behaviour as the model sees it: state, output, timeouts, crashes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import psutil

from harmonia.tools.python import NO_OUTPUT, PythonTool


def test_state_is_kept_between_calls(run: Any) -> None:
    assert run("state_x = 41\nimport math").text == NO_OUTPUT
    out = run("print(state_x + 1, math.floor(2.5))")
    assert out.text == "42 2\n"
    assert not out.is_error


def test_last_expression_and_displays_are_shown_as_text_plain(run: Any) -> None:
    out = run("from IPython.display import display\ndisplay({'a': 1})\n6 * 7")
    assert out.text == "{'a': 1}\n42\n"


def test_silent_cell_gets_the_warning_the_model_knows(run: Any) -> None:
    out = run("y_silent = 1")
    assert out.text == (
        "[WARN] No output available. Use print() to output anything to stdout to receive the output"
    )


def test_stdout_stderr_and_traceback_keep_arrival_order(run: Any) -> None:
    code = (
        "import sys\n"
        "print('out-1', flush=True)\n"
        "print('err-1', file=sys.stderr, flush=True)\n"
        "print('out-2', flush=True)\n"
        "raise ValueError('boom')\n"
    )
    out = run(code)
    text = out.text
    positions = [text.index(s) for s in ("out-1", "err-1", "out-2", "ValueError: boom")]
    assert positions == sorted(positions), text
    assert out.is_error
    assert out.metadata["error"] == "ValueError: boom"
    assert out.metadata["status"] == "error"


def test_tracebacks_and_printed_colours_carry_no_ansi_codes(run: Any) -> None:
    out = run("def f():\n    return 1 / 0\nf()")
    assert "\x1b" not in out.text
    assert "ZeroDivisionError: division by zero" in out.text
    assert "----> 2     return 1 / 0" in out.text  # the frame lines survive stripping
    printed = run("print('\\x1b[1;31mred\\x1b[0m plain')")
    assert printed.text == "red plain\n"


def test_a_10_mb_print_is_cut_to_head_and_tail(run: Any, shared: PythonTool) -> None:
    out = run("print('HEAD' + 'x' * 10_000_000 + 'TAIL')", timeout=120)
    budget = shared.config.max_output_chars
    assert len(out.text) < budget + 100
    assert out.text.startswith("HEADxxx")
    assert out.text.endswith("xxxTAIL\n")
    omitted = 10_000_009 - budget
    assert f"[... {omitted} characters omitted ...]" in out.text
    assert out.metadata["truncated_chars"] == omitted


def test_images_are_saved_to_the_data_directory_and_named_by_path(
    run: Any, shared: PythonTool
) -> None:
    # A valid 1x1 PNG built in the kernel: no plotting library needed.
    code = (
        "import struct, zlib\n"
        "from IPython.display import Image, display\n"
        "def chunk(kind, data):\n"
        "    body = kind + data\n"
        "    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))\n"
        "header = struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)\n"
        "png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header)"
        " + chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b''))\n"
        "display(Image(data=png))\n"
        "print('after')\n"
    )
    out = run(code)
    [host_path] = out.metadata["images"]
    name = host_path.rsplit("/", 1)[1]
    assert out.text == f"[image saved to /mnt/data/{name}]\nafter\n"
    saved = shared.data_dir / name
    assert saved.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # The path the model was given is the one its code can open.
    assert run(f"import os; print(os.path.getsize('/mnt/data/{name}'))").text == (
        f"{saved.stat().st_size}\n"
    )


def test_timeout_interrupts_the_cell_and_keeps_state(run: Any, timing: Any) -> None:
    TIMEOUT_S, GRACE_S = timing
    run("kept_before_timeout = 'still here'")
    started = time.monotonic()
    out = run("print('started', flush=True)\nwhile True:\n    pass")
    elapsed = time.monotonic() - started
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + GRACE_S + 1.5
    assert out.text.startswith("started\n")
    assert "KeyboardInterrupt" in out.text
    assert out.text.endswith(
        f"[ERROR] Execution timed out after {TIMEOUT_S} seconds and was interrupted. "
        "Variables and imports from earlier calls are kept."
    )
    assert out.metadata["status"] == "interrupted"
    assert run("print(kept_before_timeout)").text == "still here\n"


def test_a_cell_that_ignores_interrupts_gets_a_new_kernel_in_bounded_time(
    aio: Any, shared: Any, timing: Any
) -> None:
    TIMEOUT_S, GRACE_S = timing
    tool = shared
    aio.run(tool.run("lost_on_restart = 1"))
    code = (
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ignoring', flush=True)\n"
        "while True:\n"
        "    pass\n"
    )
    started = time.monotonic()
    out = aio.run(tool.run(code))
    elapsed = time.monotonic() - started
    # timeout, then the grace, then one kernel start (about a second; generous bound).
    assert TIMEOUT_S + GRACE_S <= elapsed < TIMEOUT_S + GRACE_S + 15
    assert out.text.startswith("ignoring\n")
    assert "did not stop when interrupted, so the Python kernel was restarted" in out.text
    assert "all variables and imports were lost" in out.text
    assert out.metadata["status"] == "restarted"
    after = aio.run(tool.run("print('alive'); lost_on_restart"))
    assert after.text.startswith("alive\n")
    assert "NameError" in after.text


def test_a_kernel_that_dies_is_reported_and_restarted_on_the_next_call(
    aio: Any, shared: Any
) -> None:
    tool = shared
    aio.run(tool.run("gone_with_kernel = 1"))
    out = aio.run(tool.run("import os\nprint('bye', flush=True)\nos._exit(3)"))
    assert out.is_error
    assert out.metadata["status"] == "died"
    assert "[ERROR] The Python kernel died while running this code (exit status 3)" in out.text
    assert tool.kernel_pid is None
    after = aio.run(tool.run("print('fresh'); gone_with_kernel"))
    assert after.text.startswith("fresh\n")
    assert "NameError" in after.text

    # A kernel that dies between calls (here: killed from a thread after the
    # call returned) is found dead at the next call, restarted, and that is said.
    aio.run(tool.run("import os, threading\nthreading.Timer(0.2, os._exit, (5,)).start()"))
    time.sleep(1.0)
    later = aio.run(tool.run("print('again')"))
    assert later.text.startswith("[WARN] The Python kernel had stopped (exit status 5)")
    assert later.text.endswith("again\n")
    assert later.metadata["kernel_restarted"] is True


def test_a_cancelled_call_kills_its_cell_and_the_next_call_says_so(aio: Any, shared: Any) -> None:
    tool = shared  # its timeout (3 s) comes well after the cancellation (1 s)
    aio.run(tool.run("print('warm')"))

    async def cancel_soon() -> bool:
        task = asyncio.ensure_future(tool.run("import time\ntime.sleep(25)"))
        await asyncio.sleep(1.0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    started = time.monotonic()
    assert aio.run(cancel_soon())
    after = aio.run(tool.run("print('next')"))
    assert time.monotonic() - started < 15
    assert after.text.startswith("[WARN] The previous call was cancelled")
    assert after.text.endswith("next\n")


def test_a_call_cancelled_while_its_kernel_starts_leaves_no_process(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make()
    session_root = str(tool.data_dir.parent)

    async def cancel_during_start() -> None:
        task = asyncio.ensure_future(tool.run("print(1)"))
        await asyncio.sleep(0.3)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    aio.run(cancel_during_start())
    time.sleep(0.5)
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(session_root in part for part in p.info["cmdline"] or [])
    ]
    assert leftovers == []
    assert aio.run(tool.run("print(2)")).text == "2\n"
    tools.close(tool)
