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

    Every field, its default and what it bounds is in docs/python-tool.md
    ("Settings"): time budgets (seconds), the reply budget, the sandbox's
    resource limits (``None`` leaves a limit as inherited), the per-session
    isolation, what the host accepts from the kernel, and where things run.
    ``dangerously_allow_unsandboxed`` runs the kernel as *your own user with
    your network and files* where the sandbox cannot start: only for code you trust.

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
