"""PythonTool: one stateful, sandboxed Jupyter kernel per session, as a harmony tool."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harmonia import SandboxUnavailableError, ToolError, ToolNamespaceConfig
from harmonia._runtime import ClosedOnExit
from harmonia.tools import ToolCall, ToolOutput

from ._config import PythonToolConfig
from ._output import NO_OUTPUT, CellOutput
from ._sandbox import (
    SANDBOX_DATA_DIR,
    Identity,
    host_is_root,
    sandbox_status,
    write_identity_files,
)
from ._session import (
    SessionCgroup,
    UidLease,
    cgroup_parent,
    kill_uid,
    lease_uid,
    mount_data_drive,
    open_dir,
    processes_of_uid,
    resident_bytes,
    unmount,
)

if TYPE_CHECKING:
    from ._kernel import CellResult, Kernel

_MIB = 1024 * 1024

# Phrases of the trained declaration that depend on the configuration.
_TRAINED_TIMEOUT = "time out after 120.0 seconds"
_TRAINED_DRIVE = "The drive at '/mnt/data'"
_TRAINED_INTERNET = "Internet access for this session is UNKNOWN. Depends on the cluster."
_NO_INTERNET = "Internet access for this session is disabled."


def _seconds(value: float) -> str:
    return repr(float(value))


IsolationMode = Literal["cgroup", "uid", "userns", "unsandboxed"]


def isolation_mode(config: PythonToolConfig | None = None) -> IsolationMode:
    """Which per-session isolation a sandboxed session gets on this host: ``cgroup``, ``uid``
    or ``userns`` (docs/security.md says what each bounds)."""
    config = config or PythonToolConfig()
    if cgroup_parent(config) is not None:
        return "cgroup"
    if host_is_root() and config.session_uid_range is not None:
        return "uid"
    return "userns"


class _Resources:
    """What a session holds on the host; released once, by close or by the finalizer."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lease: UidLease | None = None
        self.cgroup: SessionCgroup | None = None
        self.mounted: Path | None = None
        self.data_fd: int | None = None

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.data_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.data_fd)
            self.data_fd = None
        if self.mounted is not None:
            with contextlib.suppress(OSError):
                unmount(self.mounted)
            self.mounted = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None
        shutil.rmtree(self.root, ignore_errors=True)


class PythonTool(ClosedOnExit):
    """The built-in ``python`` tool: a stateful Jupyter kernel in a bubblewrap sandbox.

    One instance is one session: one kernel (started on the first call),
    one data directory (``/mnt/data`` inside), calls run one at a time. Where
    the sandbox (docs/python-tool.md) cannot start, :meth:`start` and :meth:`call`
    raise :class:`harmonia.SandboxUnavailableError` saying why, unless
    ``PythonToolConfig(dangerously_allow_unsandboxed=True)``. Example (it starts a kernel)::

        async with PythonTool(PythonToolConfig(timeout=30)) as tool:
            await tool.run("x = 41")
            print((await tool.run("x + 1")).text)   # 42
    """

    def __init__(self, config: PythonToolConfig | None = None) -> None:
        self._config = config or PythonToolConfig()
        self._lock = asyncio.Lock()
        self._kernel: Kernel | None = None
        self._closed = False
        self._calls = 0
        self._pending_note: str | None = None
        # Everything of the session lives under one temporary root: the kernel's
        # home and sockets, and the data drive unless the caller chose one.
        self._root = Path(tempfile.mkdtemp(prefix="harmonia-py-"))
        self._resources = _Resources(self._root)
        self._cleanup = weakref.finalize(self, self._resources.close)
        if self._config.data_dir is None:
            self._data = self._root / "data"
        else:
            self._data = Path(self._config.data_dir).resolve()
        self._sandboxed: bool | None = None
        self._who: Identity | None = None
        self._mode: IsolationMode | None = None

    @property
    def namespace(self) -> str:
        return "python"

    def namespace_config(self) -> ToolNamespaceConfig:
        """The trained declaration, made true to this session: internet access disabled in
        the sandbox, ``config.timeout``, an unsandboxed kernel's real data directory."""
        text = ToolNamespaceConfig.python().description or ""
        timeout = _seconds(self._config.timeout)
        text = text.replace(_TRAINED_TIMEOUT, f"time out after {timeout} seconds")
        if self._will_sandbox():
            text = text.replace(_TRAINED_INTERNET, _NO_INTERNET)
        else:
            text = text.replace(_TRAINED_DRIVE, f"The drive at '{self._data}'")
        return ToolNamespaceConfig("python", text, [])

    async def call(self, call: ToolCall) -> ToolOutput:
        """Run the call's code (its whole body) in this session's kernel."""
        return await self.run(call.arguments)

    async def aclose(self) -> None:
        """Stop the kernel and everything it started; delete the temporary directories."""
        async with self._lock:
            self._closed = True
            if self._kernel is not None:
                await self._kernel.stop()
                self._kernel = None
            self._cleanup()

    @property
    def config(self) -> PythonToolConfig:
        return self._config

    @property
    def data_dir(self) -> Path:
        """The host directory the code sees as ``/mnt/data`` (its files persist across calls)."""
        return self._data

    @property
    def isolation(self) -> IsolationMode | None:
        """The per-session isolation in force: :func:`isolation_mode`'s answer, or
        ``unsandboxed`` (``None`` until the first kernel starts)."""
        return self._mode

    @property
    def session_uid(self) -> int | None:
        """The uid the session's code runs as (as the host sees it), once started."""
        return None if self._who is None else self._who.uid

    @property
    def data_size_limit(self) -> int | None:
        """The size cap of ``/mnt/data`` in force, or ``None`` when it is a plain directory."""
        return self._config.data_size_limit if self._resources.mounted is not None else None

    @property
    def sandboxed(self) -> bool:
        """Whether this session's kernel runs (or will run) inside the sandbox."""
        return self._will_sandbox()

    @property
    def kernel_pid(self) -> int | None:
        """Host pid of the running kernel's outermost process, or ``None``."""
        return None if self._kernel is None else self._kernel.pid

    async def __aenter__(self) -> PythonTool:
        await self.start()
        return self

    async def start(self) -> None:
        """Start the kernel now rather than on the first call (errors surface here)."""
        async with self._lock:
            await self._ensure_kernel()

    async def run(self, code: str) -> ToolOutput:
        """Run ``code`` in the session and return what the model reads."""
        async with self._lock:
            started = time.perf_counter()
            note = await self._ensure_kernel()
            assert self._kernel is not None
            self._calls += 1
            output = CellOutput(
                self._config.max_output_chars,
                self._resources.data_fd,
                self._shown_data_dir(),
                f"output_{self._calls}_",
                self._owner(),
                max_image_bytes=self._config.max_image_bytes,
                max_images=self._config.max_images_per_call,
            )
            over: list[int] = []  # the watchdog's reading when it stopped the session
            watch = self._watch_memory(over)
            try:
                result = await self._kernel.execute(code, output)
            except asyncio.CancelledError:
                # The cell may still be running; a kernel busy with it would make
                # the next call time out. Kill it (bounded) and tell the model later.
                await self._kernel.stop()
                self._kernel = None
                self._pending_note = (
                    "[WARN] The previous call was cancelled, so the Python kernel was "
                    f"restarted: {self._lost(' from earlier calls')}\n"
                )
                raise
            finally:
                if watch is not None:
                    watch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watch
            killed = 0
            if result.outcome == "died" or over:
                await self._kernel.stop()
                self._kernel = None
            else:
                # Processes do not outlive the call that started them.
                killed = await asyncio.to_thread(self._kernel.kill_leftovers)
            reply = self._reply(result, note, time.perf_counter() - started, killed)
            return self._over_memory(reply, over[0]) if over else reply

    def _watch_memory(self, over: list[int]) -> asyncio.Task[None] | None:
        """In uid mode (no cgroup; RLIMIT_AS bounds each process alone), watch the session's
        total memory while a call runs: past ``session_memory_limit`` kill every process of
        its uid, the kernel too, and append the reading to ``over``."""
        limit = self._config.session_memory_limit
        lease = self._resources.lease
        if self._mode != "uid" or lease is None or limit is None:
            return None
        uid, interval = lease.uid, self._config.memory_watch_interval

        async def watch() -> None:
            while True:
                await asyncio.sleep(interval)
                reading = await asyncio.to_thread(lambda: resident_bytes(processes_of_uid(uid)))
                if reading > limit:
                    over.append(reading)
                    await asyncio.to_thread(kill_uid, uid)
                    return

        return asyncio.create_task(watch())

    def _over_memory(self, reply: ToolOutput, reading: int) -> ToolOutput:
        """The reply of a call whose session the memory watchdog stopped."""
        limit = self._config.session_memory_limit or 0
        line = (
            f"[ERROR] This session's processes together held {reading / _MIB:,.0f} MiB of "
            f"memory, more than its limit of {limit / _MIB:,.0f} MiB, so all of them were "
            f"stopped, the Python kernel too: {self._lost()} A fresh kernel starts with the "
            "next call; hold less in memory at once."
        )
        kept = [
            text
            for text in reply.text.splitlines()
            if not text.startswith("[ERROR] The Python kernel died")
        ]
        text = "\n".join([*kept, line]) if reply.text != NO_OUTPUT else line
        metadata = {**reply.metadata, "status": "memory", "kernel_restarted": True}
        metadata["memory_bytes"] = reading
        return ToolOutput(text=text, metadata=metadata, is_error=True)

    # -- internals ---------------------------------------------------------

    def _will_sandbox(self) -> bool:
        if self._sandboxed is None:
            status = sandbox_status(self._config)
            if not status.ok and not self._config.dangerously_allow_unsandboxed:
                raise SandboxUnavailableError(
                    f"the python tool cannot start its sandbox: {status.reason}", tool="python"
                )
            self._sandboxed = status.ok
        return self._sandboxed

    def _owner(self) -> tuple[int, int] | None:
        if self._sandboxed and host_is_root() and self._who is not None:
            return (self._who.uid, self._who.gid)
        return None

    def _shown_data_dir(self) -> str:
        return SANDBOX_DATA_DIR if self._sandboxed else str(self._data)

    def _lost(self, which: str = "") -> str:
        """What a kernel restart costs the model, said the same way in every message."""
        drive = self._shown_data_dir()
        return f"all variables and imports{which} were lost (files in {drive} are kept)."

    def _set_up_session(self, sandboxed: bool) -> None:
        """Once per session: identity, cgroup, data drive, the data directory's fd."""
        res, config = self._resources, self._config
        if not sandboxed:
            self._mode = "unsandboxed"
            self._data.mkdir(parents=True, exist_ok=True)
            res.data_fd = open_dir(self._data)
            return
        root = host_is_root()
        uid, gid = config.sandbox_uid, config.sandbox_gid
        if root and config.session_uid_range is not None:
            res.lease = lease_uid(*config.session_uid_range)
            uid = gid = res.lease.uid
        parent = cgroup_parent(config)
        if parent is not None:
            res.cgroup = SessionCgroup(parent, config)
        self._mode = "cgroup" if parent is not None else ("uid" if res.lease else "userns")
        self._who = Identity(uid, gid, res.cgroup.procs_file if res.cgroup else None)
        write_identity_files(self._root / "etc", uid, gid)
        if config.data_dir is None and root and config.data_size_limit is not None:
            self._data.mkdir(mode=0o700)
            try:
                mount_data_drive(self._data, config.data_size_limit, (uid, gid))
                res.mounted = self._data
            except ToolError:
                # No mount here (a container without the capability): a plain
                # directory, bounded per file only; data_size_limit says None.
                os.chown(self._data, uid, gid)
                os.chmod(self._data, 0o755)
        else:
            self._data.mkdir(parents=True, exist_ok=True)
            if root:
                os.chown(self._data, uid, gid)
        res.data_fd = open_dir(self._data)

    async def _ensure_kernel(self) -> str | None:
        """Start the kernel if there is none; say so when that replaces a dead one."""
        if self._closed:
            raise ToolError("this python session was closed; start a new one", tool="python")
        note, self._pending_note = self._pending_note, None
        if self._kernel is not None and not await self._kernel.is_alive():
            status = await self._kernel.exit_status()
            await self._kernel.stop()
            self._kernel = None
            note = (
                f"[WARN] The Python kernel had stopped (exit status {status}) and was restarted: "
                f"{self._lost(' from earlier calls')}\n"
            )
        if self._kernel is None:
            from ._kernel import Kernel  # jupyter_client: imported only when needed

            if self._sandboxed is None:
                # The first probe starts bwrap (about 0.3 s): not on the event loop.
                await asyncio.to_thread(sandbox_status, self._config)

            sandboxed = self._will_sandbox()
            if self._mode is None:
                self._set_up_session(sandboxed)
            home = self._root / "home"
            home.mkdir(mode=0o700, exist_ok=True)
            kernel = Kernel(
                self._config,
                self._root,
                self._data,
                home,
                who=self._who if sandboxed else None,
                owner=self._owner(),
            )
            await kernel.start()
            self._kernel = kernel
        return note

    def _reply(
        self, result: CellResult, note: str | None, elapsed: float, killed: int = 0
    ) -> ToolOutput:
        out = result.output
        text = out.text()
        if killed:
            text = (text.rstrip("\n") + "\n" if text.strip() else "") + (
                f"[WARN] {killed} process(es) this call started were still running when it "
                "ended and were stopped: processes do not outlive the call that starts them."
            )
        timeout = _seconds(self._config.timeout)
        lost = self._lost()
        status_line = {
            "ok": None,
            "interrupted": (
                f"[ERROR] Execution timed out after {timeout} seconds and was interrupted. "
                "Variables and imports from earlier calls are kept."
            ),
            "restarted": (
                f"[ERROR] Execution timed out after {timeout} seconds and did not stop when "
                f"interrupted, so the Python kernel was restarted: {lost}"
            ),
            "lost": (
                "[ERROR] The kernel sent a message larger than the "
                f"{self._config.max_message_bytes} bytes the tool accepts, so the rest of this "
                f"call's output was lost and the Python kernel was restarted: {lost}"
            ),
            "died": (
                f"[ERROR] The Python kernel died while running this code (exit status "
                f"{result.exit_status}): {lost} A fresh kernel starts with the next call."
            ),
        }[result.outcome]
        if status_line is not None:
            text = f"{text.rstrip()}\n{status_line}" if text else status_line
        elif not text:
            text = NO_OUTPUT
        if note:
            text = note + text
        metadata: dict[str, Any] = {
            "status": result.outcome if result.outcome != "ok" or out.error is None else "error",
            "images": [str(self._data / name) for name in out.images],
            "images_refused": out.images_refused,
            "processes_stopped": killed,
            "truncated_chars": out.buffer.truncated,
            "elapsed_s": round(elapsed, 6),
            "kernel_restarted": note is not None or result.outcome in ("restarted", "died", "lost"),
        }
        if out.error is not None:
            metadata["error"] = out.error
        is_error = result.outcome != "ok" or out.error is not None
        return ToolOutput(text=text, metadata=metadata, is_error=is_error)
