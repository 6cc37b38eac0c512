"""One Jupyter kernel: start it (sandboxed or not), run a cell with a deadline, stop it.

This module imports ``jupyter_client``; :mod:`._tool` imports it only when a
session starts its first kernel, so ``import harmonia.tools.python`` stays light.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from harmonia import SandboxUnavailableError, ToolError
from harmonia._errors import install_hint

from ._config import PythonToolConfig
from ._output import CellOutput
from ._sandbox import SessionDirs, kernel_argv, kernel_env

Outcome = Literal["idle", "timeout", "died"]
# How often a cell that prints nothing checks that its kernel is still alive.
_POLL_S = 0.25


class _Manager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel spec is built here, not found on disk.

    When the kernel runs as another uid, the connection file (written 0600 by
    jupyter_client) is handed to that uid so the kernel can read its keys.
    """

    def __init__(self, spec: KernelSpec, owner: tuple[int, int] | None, **kwargs: Any) -> None:
        self._harmonia_spec = spec
        self._harmonia_owner = owner
        super().__init__(**kwargs)

    @property
    def kernel_spec(self) -> KernelSpec:
        return self._harmonia_spec

    def write_connection_file(self, **kwargs: Any) -> None:
        super().write_connection_file(**kwargs)
        if self._harmonia_owner is not None:
            os.chown(self.connection_file, *self._harmonia_owner)


@dataclass
class CellResult:
    """What happened to one cell: how it ended and what it printed."""

    output: CellOutput
    outcome: Literal["ok", "interrupted", "restarted", "died"]
    exit_status: int | None = None


class Kernel:
    """A kernel process and a client connected to it; not safe for concurrent cells."""

    def __init__(
        self,
        config: PythonToolConfig,
        dirs: SessionDirs,
        home: Path,
        *,
        sandboxed: bool,
        owner: tuple[int, int] | None,
    ) -> None:
        self._config = config
        self._dirs = dirs
        self._home = home
        self._sandboxed = sandboxed
        self._owner = owner
        self._km: _Manager | None = None
        self._kc: Any = None
        self._log_path = home / "kernel.log"

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            # Cancelled or failed half-way: whatever was launched must not outlive us.
            await self.stop()
            raise

    async def _start(self) -> None:
        python = self._config.python or sys.executable
        argv = kernel_argv(self._config, self._dirs if self._sandboxed else None, python)
        spec = KernelSpec(
            argv=argv,
            display_name="harmonia python",
            language="python",
            # A SIGINT sent to bubblewrap never reaches the kernel inside its PID
            # namespace; an interrupt_request on the control channel does.
            interrupt_mode="message",
        )
        km = _Manager(spec, self._owner, transport="ipc")
        km.ip = str(self._dirs.ipc / "kernel")
        km.connection_file = str(self._dirs.ipc / "kernel.json")
        self._km = km
        env = {} if self._sandboxed else kernel_env(self._home)
        cwd = str(self._dirs.data)
        with self._log_path.open("ab") as log:
            await km.start_kernel(env=env, cwd=cwd, stdout=log, stderr=log)
        kc = km.client()
        kc.start_channels()
        self._kc = kc
        try:
            await kc.wait_for_ready(timeout=self._config.startup_timeout)
        except (RuntimeError, TimeoutError) as exc:
            tail = self._log_tail()
            error = SandboxUnavailableError if self._sandboxed else ToolError
            raise error(
                f"the Python kernel did not start ({exc}); its log ends: {tail or '(empty)'}. "
                "Check that the interpreter has ipykernel installed "
                f"({install_hint('python')}).",
                tool="python",
            ) from exc

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-800:].strip()
        except OSError:
            return ""

    async def is_alive(self) -> bool:
        return self._km is not None and await self._km.is_alive()

    async def exit_status(self) -> int | None:
        km = self._km
        if km is None or km.provisioner is None:
            return None
        return await km.provisioner.poll()

    @property
    def pid(self) -> int | None:
        """The host pid of the kernel's outermost process (bubblewrap when sandboxed)."""
        km = self._km
        process = getattr(km.provisioner, "process", None) if km else None
        return None if process is None else int(process.pid)

    async def stop(self) -> None:
        """Kill the kernel (and, through its namespace, everything it started)."""
        kc, km = self._kc, self._km
        self._kc = self._km = None
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        if km is not None:
            with contextlib.suppress(Exception):
                await km.shutdown_kernel(now=True)

    async def execute(self, code: str, output: CellOutput) -> CellResult:
        """Run ``code``; on timeout interrupt, and restart if the interrupt is ignored."""
        kc = self._kc
        assert kc is not None, "Kernel.execute before start"
        await self._drain_shell()
        loop = asyncio.get_running_loop()
        msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
        ended = await self._collect(msg_id, output, loop.time() + self._config.timeout)
        if ended == "idle":
            return CellResult(output, "ok")
        if ended == "timeout":
            assert self._km is not None
            await self._km.interrupt_kernel()
            grace_end = loop.time() + self._config.interrupt_grace
            ended = await self._collect(msg_id, output, grace_end)
            if ended == "idle":
                return CellResult(output, "interrupted")
            if ended == "timeout":
                await self.stop()
                await self.start()
                return CellResult(output, "restarted")
        return CellResult(output, "died", await self.exit_status())

    async def _collect(self, msg_id: str, output: CellOutput, deadline: float) -> Outcome:
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return "timeout"
            try:
                msg = await self._kc.get_iopub_msg(timeout=min(remaining, _POLL_S))
            except queue.Empty:
                if not await self.is_alive():
                    return "died"
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                return "idle"
            output.add(kind, content)

    async def _drain_shell(self) -> None:
        # Replies to earlier cells (and to interrupted ones) are not read one by
        # one; drop them so they cannot pile up in the socket.
        while True:
            try:
                await self._kc.get_shell_msg(timeout=0)
            except queue.Empty:
                return
