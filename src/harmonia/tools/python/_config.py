"""The python tool's settings: the one place every default lives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    * ``sandbox_uid``/``sandbox_gid`` -- the unprivileged identity the kernel
      runs as (``nobody`` by default).

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
    interrupt_grace: float = 5.0
    startup_timeout: float = TIMEOUTS.python_startup
    max_output_chars: int = 20_000
    memory_limit: int | None = 2 * _GIB
    cpu_time_limit: int | None = 3600
    file_size_limit: int | None = 1 * _GIB
    open_files_limit: int | None = 1024
    process_limit: int | None = 128
    tmp_size: int = 256 * _MIB
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    python: str | None = None
    data_dir: str | Path | None = None
    dangerously_allow_unsandboxed: bool = False

    def __post_init__(self) -> None:
        for name in ("timeout", "interrupt_grace", "startup_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise InputError(
                    f"PythonToolConfig.{name} must be a positive number of seconds, got {value!r}"
                )
        positive = ("max_output_chars", "tmp_size")
        optional = (
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
