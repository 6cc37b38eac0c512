"""Settings, output assembly, and what happens when the sandbox cannot start."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from harmonia import InputError, SandboxUnavailableError
from harmonia.tools.python import PythonTool, PythonToolConfig, SandboxStatus, sandbox_status
from harmonia.tools.python import _tool as tool_module
from harmonia.tools.python._output import CellOutput, OutputBuffer, strip_ansi


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", 0),
        ("timeout", -1.0),
        ("interrupt_grace", True),
        ("max_output_chars", 0),
        ("memory_limit", 1.5),
        ("process_limit", -3),
    ],
)
def test_config_rejects_nonsense(field: str, value: object) -> None:
    with pytest.raises(InputError, match=f"PythonToolConfig.{field}"):
        PythonToolConfig(**{field: value})  # type: ignore[arg-type]


def test_rlimits_leave_out_unset_limits_and_always_forbid_core_dumps() -> None:
    limits = PythonToolConfig(memory_limit=None, cpu_time_limit=7).rlimits()
    assert "AS" not in limits
    assert limits["CPU"] == 7
    assert limits["CORE"] == 0


def test_buffer_keeps_everything_within_budget_and_head_and_tail_beyond() -> None:
    small = OutputBuffer(budget=10)
    small.append("abc")
    small.append("def\n")
    assert small.text() == "abcdef\n"
    assert small.truncated == 0
    big = OutputBuffer(budget=10)
    for piece in ["12345", "67890", "ABCDE", "FGHIJ"]:
        big.append(piece)
    assert big.text() == "12345\n[... 10 characters omitted ...]\nFGHIJ"
    assert big.truncated == 10


def test_strip_ansi_removes_colour_cursor_and_title_sequences() -> None:
    raw = "\x1b[1;31mError\x1b[0m \x1b]0;title\x07done\x1b[2K\x1b(B"
    assert strip_ansi(raw) == "Error done"


def test_cell_output_prefers_an_image_path_over_its_text_plain(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = CellOutput(100, fd, "/mnt/data", "output_1_")
        out.add("stream", {"name": "stdout", "text": "a\n"})
        out.add("display_data", {"data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Fig>"}})
        out.add("execute_result", {"data": {"text/plain": "3"}})
    finally:
        os.close(fd)
    [name] = out.images
    assert re.fullmatch(r"output_1_[0-9a-f]{12}\.png", name)
    assert out.text() == f"a\n[image saved to /mnt/data/{name}]\n3\n"
    assert (tmp_path / name).read_bytes() == b"\x89PNG\r\n\x1a\n"


def _broken() -> PythonToolConfig:
    # An interpreter that does not exist: the probe fails everywhere, sandbox or not.
    return PythonToolConfig(python="/nonexistent/python3")


def test_probe_failure_says_why_and_how_to_opt_out() -> None:
    status = sandbox_status(_broken())
    assert not status.ok
    assert "dangerously_allow_unsandboxed=True" in status.reason


def test_without_a_sandbox_the_tool_refuses(aio: Any) -> None:
    tool = PythonTool(_broken())
    with pytest.raises(SandboxUnavailableError, match="cannot start its sandbox") as caught:
        aio.run(tool.start())
    assert caught.value.tool == "python"
    with pytest.raises(SandboxUnavailableError):
        tool.namespace_config()
    aio.run(tool.aclose())


def test_opting_in_runs_an_unsandboxed_kernel_and_says_so_in_the_declaration(
    aio: Any, tools: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ipykernel", reason="the python extra is not installed")
    monkeypatch.setattr(
        tool_module, "sandbox_status", lambda config: SandboxStatus(False, "simulated")
    )
    monkeypatch.setenv("HARMONIA_TEST_API_KEY", "sk-not-for-the-kernel")
    tool = tools.make(dangerously_allow_unsandboxed=True)
    assert tool.sandboxed is False
    description = tool.namespace_config().description
    assert description is not None
    assert f"The drive at '{tool.data_dir}'" in description
    assert "Internet access for this session is UNKNOWN." in description
    out = aio.run(
        tool.run("import os\nprint(os.getcwd())\nprint('HARMONIA_TEST_API_KEY' in os.environ)")
    )
    assert out.text == f"{tool.data_dir}\nFalse\n"
    assert os.getpid() != tool.kernel_pid
    tools.close(tool)
