"""One Jupyter kernel: start it (sandboxed or not), run a cell with a deadline, stop it.

This module imports ``jupyter_client``; :mod:`._tool` imports it only when a
session starts its first kernel, so ``import harmonia.tools.python`` stays light.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager

from harmonia import SandboxUnavailableError, ToolError
from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS

from ._config import PythonToolConfig
from ._output import CellOutput
from ._sandbox import (
    Identity,
    SessionDirs,
    kernel_argv,
    kernel_env,
    prepare_kernel_dir,
    seal_ipc_dir,
)
from ._session import descendants, kill_below

Outcome = Literal["idle", "timeout", "died", "lost"]
# How often a cell that prints nothing checks that its kernel is still alive.
_POLL_S = TIMEOUTS.kernel_poll
_MIB = 1024 * 1024
# Below this address space a kernel may fail to start with no message at all
# (measured: 256 MiB starts, 128 MiB dies silently, 96 MiB cannot start threads).
_SMALL_MEMORY = 256 * _MIB
# What a kernel's log says when it ran out of address space while starting.
_OUT_OF_MEMORY = re.compile(
    r"MemoryError|Cannot allocate memory|unknown encoding|failed to map segment|"
    r"cannot allocate|out of memory|std::bad_alloc|Resource temporarily unavailable|"
    r"can't start new thread",
    re.IGNORECASE,
)


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
            # The file lies in a directory only the host can write: no link to follow.
            os.chown(self.connection_file, *self._harmonia_owner, follow_symlinks=False)


@dataclass
class CellResult:
    """What happened to one cell: how it ended and what it printed."""

    output: CellOutput
    outcome: Literal["ok", "interrupted", "restarted", "died", "lost"]
    exit_status: int | None = None


class Kernel:
    """A kernel process and a client connected to it; not safe for concurrent cells."""

    def __init__(
        self,
        config: PythonToolConfig,
        root: Path,
        data: Path,
        home: Path,
        *,
        who: Identity | None,
        owner: tuple[int, int] | None,
    ) -> None:
        self._config = config
        self._root = root
        self._data = data
        self._home = home
        self._who = who
        self._sandboxed = who is not None
        self._owner = owner
        self._km: _Manager | None = None
        self._kc: Any = None
        self._dirs: SessionDirs | None = None
        self._log_path = home / "kernel.log"
        # The processes that are the kernel itself (bubblewrap's two and the
        # kernel); anything else below them was started by code.
        self._own: frozenset[int] = frozenset()
        # Report the host dropping its iopub or shell connection (a message over
        # max_message_bytes): the output of that moment is lost, and the reply says so.
        self._monitors: list[Any] = []

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            # Cancelled or failed half-way: whatever was launched must not outlive us.
            await self.stop()
            raise

    async def _start(self) -> None:
        python = self._config.python or sys.executable
        # A fresh directory per start: nothing a previous kernel left can be in it.
        kernel_dir = self._root / f"kernel-{secrets.token_hex(6)}"
        prepare_kernel_dir(kernel_dir, self._owner)
        etc = self._root / "etc" if self._sandboxed else None
        self._dirs = dirs = SessionDirs(self._data, kernel_dir, etc)
        argv = kernel_argv(self._config, dirs, python, self._who)
        spec = KernelSpec(
            argv=argv,
            display_name="harmonia python",
            language="python",
            # A SIGINT sent to bubblewrap never reaches the kernel inside its PID
            # namespace; an interrupt_request on the control channel does.
            interrupt_mode="message",
        )
        # The host refuses (drops, unread) any message larger than this: a
        # hostile kernel cannot make the host hold a gigabyte.
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, self._config.max_message_bytes)
        km = _Manager(spec, self._owner, transport="ipc", context=context)
        km.ip = str(dirs.ipc / "kernel")
        km.connection_file = str(dirs.connection_file)
        self._km = km
        env = {} if self._sandboxed else kernel_env(self._home)
        cwd = str(dirs.data)
        self._log_path.write_bytes(b"")
        with self._log_path.open("ab") as log:
            await km.start_kernel(env=env, cwd=cwd, stdout=log, stderr=log)
        kc = km.client(context=context)
        kc.start_channels()
        self._kc = kc
        self._monitors = [
            channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            for channel in (kc.iopub_channel, kc.shell_channel)
        ]
        try:
            await kc.wait_for_ready(timeout=self._config.startup_timeout)
        except (RuntimeError, TimeoutError) as exc:
            raise self._start_error(str(exc)) from exc
        if self._sandboxed:
            seal_ipc_dir(kernel_dir)
        outer = self.pid
        if outer is not None:
            self._own = frozenset([outer, *descendants(outer)])

    def _start_error(self, reason: str) -> ToolError:
        """Why the kernel did not start, from its log: memory, a missing module, or as is."""
        log = self._log_tail()
        error = SandboxUnavailableError if self._sandboxed else ToolError
        limit = self._config.memory_limit
        if limit is not None and (_OUT_OF_MEMORY.search(log) or limit < _SMALL_MEMORY):
            return error(
                f"the Python kernel ran out of memory while starting ({reason}): memory_limit="
                f"{limit / _MIB:.0f} MiB (RLIMIT_AS, which counts reserved address space, not "
                "only what is used) is too small for Python and ipykernel; raise "
                "PythonToolConfig.memory_limit (at least 256 MiB; 512 MiB or more to do work). "
                f"The kernel's log ends: {log[-300:] or '(empty)'}",
                tool="python",
            )
        if re.search(r"No module named '?(ipykernel|jupyter_client|zmq)", log):
            return error(
                f"the Python kernel did not start: {log[-300:]}. Install the python extra into "
                f"the kernel's interpreter ({install_hint('python')}).",
                tool="python",
            )
        return error(
            f"the Python kernel did not start ({reason}); its log ends: {log or '(empty)'}",
            tool="python",
        )

    def _log_tail(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-1500:].strip()
        except OSError:
            return ""

    def kill_leftovers(self) -> int:
        """Kill every process the code started that is still running; returns the count."""
        outer = self.pid
        if outer is None or not self._own:
            return 0
        return kill_below(outer, self._own)

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
        monitors, self._monitors = self._monitors, []
        for monitor in monitors:
            with contextlib.suppress(Exception):
                monitor.close(linger=0)
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        if km is not None:
            with contextlib.suppress(Exception):
                await km.shutdown_kernel(now=True)
            with contextlib.suppress(Exception):
                km.context.destroy(linger=0)
        dirs, self._dirs = self._dirs, None
        self._own = frozenset()
        if dirs is not None:
            shutil.rmtree(dirs.kernel, ignore_errors=True)

    async def execute(self, code: str, output: CellOutput) -> CellResult:
        """Run ``code``; on timeout interrupt, and restart if the interrupt is ignored."""
        kc = self._kc
        assert kc is not None, "Kernel.execute before start"
        await self._drain_shell()
        loop = asyncio.get_running_loop()
        msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
        ended = await self._collect(msg_id, output, loop.time() + self._config.timeout)
        interrupted = ended == "timeout"
        if interrupted:
            assert self._km is not None
            await self._km.interrupt_kernel()
            ended = await self._collect(msg_id, output, loop.time() + self._config.interrupt_grace)
            if ended == "timeout":
                await self._restart()
                return CellResult(output, "restarted")
        if ended == "lost" or (ended == "idle" and await self._disconnected()):
            await self._restart()
            return CellResult(output, "lost")
        if ended == "idle":
            return CellResult(output, "interrupted" if interrupted else "ok")
        return CellResult(output, "died", await self.exit_status())

    async def _restart(self) -> None:
        await self.stop()
        await self.start()

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
                if await self._disconnected():
                    # The host dropped a message too large to accept; the
                    # channel is gone, and with it the rest of this cell's output.
                    return "lost"
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                return "idle"
            output.add(kind, content)

    async def _disconnected(self) -> bool:
        """Whether the host dropped the iopub or shell connection since the last look.

        ZeroMQ drops a connection that carried an oversized message and the
        channel does not come back; the caller restarts the kernel.
        """
        seen = False
        for monitor in self._monitors:
            while await monitor.poll(0):
                await monitor.recv_multipart()
                seen = True
        return seen

    async def _drain_shell(self) -> None:
        # Replies to earlier cells (and to interrupted ones) are not read one by
        # one; drop them so they cannot pile up in the socket.
        while True:
            try:
                await self._kc.get_shell_msg(timeout=0)
            except queue.Empty:
                return
