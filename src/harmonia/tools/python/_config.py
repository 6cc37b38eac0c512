"""The python tool's settings: the one place every default lives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harmonia import InputError
from harmonia._runtime import TIMEOUTS

_MIB = 1024 * 1024
_GIB = 1024 * _MIB


@dataclass(frozen=True)
class PythonToolConfig:
    """How a :class:`PythonTool` session runs its kernel.

    Time (seconds):

    * ``timeout`` -- wall-clock limit of one call; the declaration the model
      reads states it. On expiry the cell is interrupted (state kept).
    * ``interrupt_grace`` -- how long an interrupted cell may take to stop
      before the kernel is killed and restarted (state lost).
    * ``startup_timeout`` -- how long a kernel may take to start.

    Output: ``max_output_chars`` -- replies longer than this keep their head
    and tail with a marker saying how much was cut.

    Sandbox limits (``None`` leaves the limit as inherited):

    * ``memory_limit`` -- address space of the kernel (RLIMIT_AS, bytes); an
      allocation beyond it raises ``MemoryError`` inside the kernel.
    * ``cpu_time_limit`` -- CPU seconds over the kernel's whole life
      (RLIMIT_CPU); past it the kernel is killed and the next call restarts it.
    * ``file_size_limit`` -- largest file the code may write (RLIMIT_FSIZE).
    * ``open_files_limit`` -- open file descriptors (RLIMIT_NOFILE).
    * ``process_limit`` -- processes and threads of the sandbox user
      (RLIMIT_NPROC; counted over every process of that uid on the host).
    * ``tmp_size`` -- size of the private ``/tmp`` (a RAM-backed tmpfs).
    * ``data_size_limit`` -- size of ``/mnt/data`` when harmonia makes it (a
      RAM-backed tmpfs mounted per session; needs a root host; ``None``: a plain
      directory bounded only per file).
    * ``sandbox_uid``/``sandbox_gid`` -- the unprivileged identity the kernel
      runs as when the host is not root (mapped in a user namespace), or when
      ``session_uid_range`` is ``None``.
    * ``session_uid_range`` -- ``(first, last)``: a root host runs each session
      as its own uid from this range, so limits counted per uid (processes)
      are per session and sessions cannot signal each other.
    * ``isolation`` -- ``"auto"``: a cgroup v2 per session where the host allows
      it (``cgroup_parent``, else the host process's own cgroup, must offer the
      ``memory`` and ``pids`` controllers), a uid per session otherwise;
      ``"uid"``: never cgroups. ``PythonTool.isolation`` says which is active.
    * ``session_memory_limit`` -- the memory of everything the session runs
      together: in cgroup mode its ``memory.max`` (``process_limit`` becomes its
      ``pids.max``); in uid mode a watchdog sums the resident memory of the
      session's processes every ``memory_watch_interval`` seconds while a call
      runs and, past the limit, stops them all (the model is told).

    Output the host accepts per call (the kernel also cuts at the source):
    ``max_image_bytes`` per image, ``max_images_per_call`` images, and
    ``max_message_bytes`` per message from the kernel (larger ones are dropped
    by the host before they are read into memory; the reply says output was lost).

    Where things run:

    * ``python`` -- the interpreter that runs the kernel (needs ``ipykernel``);
      default: the one running harmonia.
    * ``data_dir`` -- the host directory shown to the code as ``/mnt/data``;
      default: a fresh temporary directory, deleted when the session closes
      (a directory you pass is kept).
    * ``dangerously_allow_unsandboxed`` -- when the sandbox cannot start, run
      the kernel anyway as *your own user with your network and files*. Off
      by default; only for code you trust.

    >>> PythonToolConfig().timeout
    120.0
    >>> from harmonia import InputError
    >>> try:
    ...     PythonToolConfig(timeout=0)
    ... except InputError as e:
    ...     print(e)
    PythonToolConfig.timeout must be a positive number of seconds, got 0
    """

    timeout: float = TIMEOUTS.python_call
    interrupt_grace: float = TIMEOUTS.python_interrupt_grace
    startup_timeout: float = TIMEOUTS.python_startup
    max_output_chars: int = 20_000
    memory_limit: int | None = 2 * _GIB
    cpu_time_limit: int | None = 3600
    file_size_limit: int | None = 1 * _GIB
    open_files_limit: int | None = 1024
    process_limit: int | None = 128
    tmp_size: int = 256 * _MIB
    data_size_limit: int | None = 1 * _GIB
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    session_uid_range: tuple[int, int] | None = (1_790_000_000, 1_790_065_535)
    isolation: Literal["auto", "uid"] = "auto"
    cgroup_parent: str | None = None
    session_memory_limit: int | None = 4 * _GIB
    memory_watch_interval: float = TIMEOUTS.memory_watch
    max_image_bytes: int = 16 * _MIB
    max_images_per_call: int = 16
    max_message_bytes: int = 64 * _MIB
    python: str | None = None
    data_dir: str | Path | None = None
    dangerously_allow_unsandboxed: bool = False

    def __post_init__(self) -> None:
        for name in ("timeout", "interrupt_grace", "startup_timeout", "memory_watch_interval"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise InputError(
                    f"PythonToolConfig.{name} must be a positive number of seconds, got {value!r}"
                )
        positive = (
            "max_output_chars",
            "tmp_size",
            "max_image_bytes",
            "max_images_per_call",
            "max_message_bytes",
        )
        optional = (
            "data_size_limit",
            "session_memory_limit",
            "memory_limit",
            "cpu_time_limit",
            "file_size_limit",
            "open_files_limit",
            "process_limit",
        )
        for name in positive + optional:
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(
                    f"PythonToolConfig.{name} must be a positive integer"
                    f"{' or None' if name in optional else ''}, got {value!r}"
                )
        if self.isolation not in ("auto", "uid"):
            raise InputError(
                f"PythonToolConfig.isolation must be 'auto' or 'uid', got {self.isolation!r}"
            )
        uids = self.session_uid_range
        if uids is not None and not (
            isinstance(uids, tuple)
            and len(uids) == 2
            and all(isinstance(u, int) and not isinstance(u, bool) for u in uids)
            and 0 < uids[0] <= uids[1] < 2**32 - 1
        ):
            raise InputError(
                "PythonToolConfig.session_uid_range must be None or (first, last) uids with "
                f"0 < first <= last < 4294967295, got {uids!r}"
            )
        # A message must be able to carry the largest image (base64) and the text budget.
        needed = self.max_image_bytes * 4 // 3 + 8 * self.max_output_chars + _MIB
        if self.max_message_bytes < needed:
            raise InputError(
                f"PythonToolConfig.max_message_bytes must be at least {needed} to carry an "
                f"image of max_image_bytes and the text budget, got {self.max_message_bytes}"
            )

    def rlimits(self) -> dict[str, int]:
        """The resource limits the sandbox launcher sets, by ``resource.RLIMIT_*`` suffix."""
        limits = {
            "AS": self.memory_limit,
            "CPU": self.cpu_time_limit,
            "FSIZE": self.file_size_limit,
            "NOFILE": self.open_files_limit,
            "NPROC": self.process_limit,
        }
        out = {name: value for name, value in limits.items() if value is not None}
        out["CORE"] = 0  # a crashing kernel must not leave core dumps in /mnt/data
        return out
