"""Per-session isolation on the host: identity, total limits, the data drive, leftovers.

Everything here runs in the host process, which is often root. The rule for
every file it touches in a directory the sandbox can write: open it relative to
a directory file descriptor with ``O_NOFOLLOW`` (and ``O_CREAT|O_EXCL`` when it
creates one) under a name the sandbox cannot predict, never by path.

Modes (see docs/security.md), chosen once per session:

* ``cgroup`` -- the host is root and a cgroup v2 directory with the ``memory`` and
  ``pids`` controllers is writable: each session gets its own cgroup
  (``memory.max``, ``pids.max``) **and** its own uid;
* ``uid`` -- the host is root without a usable cgroup v2: each session runs as its
  own uid from ``PythonToolConfig.session_uid_range``, so the process limit
  (RLIMIT_NPROC) is per session; memory is bounded per process (RLIMIT_AS) and,
  while a call runs, in total by a watchdog (``PythonTool``) that sums the
  resident memory of the session's uid and kills its processes past
  ``session_memory_limit``;
* ``userns`` -- the host is not root: bubblewrap maps the caller to
  ``sandbox_uid`` in a user namespace; the process limit is then shared with every
  process of the caller's uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import secrets
import signal
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harmonia import ToolError

from ._config import PythonToolConfig

# -- files in directories the sandbox can write --------------------------------


def open_dir(path: Path) -> int:
    """An fd on ``path`` itself; refuses a symlink at the last component."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def unpredictable_name(prefix: str, ext: str) -> str:
    return f"{prefix}{secrets.token_hex(6)}.{ext}"


def create_file(dir_fd: int, name: str, data: bytes, owner: tuple[int, int] | None) -> None:
    """Create ``name`` in ``dir_fd`` (never an existing file or a link) and write ``data``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        # Unlinking removes a directory entry only; whatever the sandbox put
        # there meanwhile is not followed.
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)


# -- the processes of a sandbox --------------------------------------------------


def _stat(pid: int) -> tuple[int, bytes] | None:
    """(parent pid, state letter) of ``pid``, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return (int(fields[1]), fields[0]) if len(fields) > 1 else None


_HAS_CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    """The children of ``pid``, from each of its threads' ``children`` file."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return out


def descendants(pid: int, *, live_only: bool = False) -> list[int]:
    """Every process below ``pid`` (``live_only``: without zombies).

    Reads only the processes below ``pid`` where the kernel offers
    ``/proc/<pid>/task/<tid>/children``; otherwise scans every process once.
    """
    children_of: Callable[[int], list[int]] = _children
    if not _HAS_CHILDREN_FILES:
        tree: dict[int, list[int]] = {}  # parent pid -> children, of every process in sight
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
                tree.setdefault(st[0], []).append(int(entry.name))
        children_of = lambda parent: tree.get(parent, [])  # noqa: E731
    found: list[int] = []
    todo = [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    if live_only:
        found = [p for p in found if (st := _stat(p)) is not None and st[1] not in (b"Z", b"X")]
    return found


def _is_below(pid: int, top: int) -> bool:
    for _ in range(4096):
        found = _stat(pid)
        if found is None or found[0] in (0, pid):
            return False
        pid = found[0]
        if pid == top:
            return True
    return False


def kill_below(top: int, keep: frozenset[int], rounds: int = 50) -> int:
    """SIGKILL every process below ``top`` except ``keep`` (see :func:`_kill_all`); how many."""
    return _kill_all(
        lambda: [pid for pid in descendants(top, live_only=True) if pid not in keep],
        lambda pid: _is_below(pid, top),
        rounds,
    )


def _kill_all(scan: Callable[[], list[int]], still_ours: Callable[[int], bool], rounds: int) -> int:
    """SIGKILL what ``scan`` finds, ``rounds`` times at most, until it finds nothing new
    (a fork bomb keeps forking while it is being killed); returns how many.

    Each pid is pinned with a pidfd first and ``still_ours`` is asked again
    through it, so a pid recycled between the scan and the kill is never hit.
    """
    signalled: set[int] = set()
    for _ in range(rounds):
        targets = [pid for pid in scan() if pid not in signalled]
        if not targets:
            break
        for pid in targets:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if still_ours(pid):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    signalled.add(pid)
            except OSError:
                pass
            finally:
                os.close(pidfd)
        time.sleep(0.005)  # let the kills land before looking again
    return len(signalled)


def processes_of_uid(uid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    out.append(int(entry.name))
    return out


def resident_bytes(pids: list[int]) -> int:
    """The resident memory of ``pids``, summed (pages two processes share count twice:
    an overestimate, never an under one)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as f:
            total += int(f.read().split()[1]) * page
    return total


def kill_uid(uid: int, rounds: int = 50) -> int:
    """SIGKILL every process of ``uid`` (a session's own; see :func:`_kill_all`); how many."""
    return _kill_all(
        lambda: processes_of_uid(uid), lambda pid: os.stat(f"/proc/{pid}").st_uid == uid, rounds
    )


# -- a uid per session -----------------------------------------------------------

_UID_LOCK_DIRS = ("/run/harmonia-python-uids", f"{tempfile.gettempdir()}/harmonia-python-uids")


def _lock_dir() -> Path:
    for candidate in _UID_LOCK_DIRS:
        path = Path(candidate)
        with contextlib.suppress(OSError):
            path.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(path)
            # Ours alone: a directory another user could write would let them
            # hold our uids or swap lock files.
            if (
                stat.S_ISDIR(info.st_mode)
                and info.st_uid == os.geteuid()
                and not info.st_mode & 0o022
            ):
                return path
    raise ToolError(
        f"no private directory for the python tool's uid leases ({', '.join(_UID_LOCK_DIRS)})",
        tool="python",
    )


@dataclass
class UidLease:
    """One uid held for one session: an exclusive lock on a file named after it."""

    uid: int
    _fd: int | None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def lease_uid(first: int, last: int) -> UidLease:
    """A uid in ``[first, last]`` that no other session (of any process here) holds.

    A uid still owning processes (left by a host process that died) is skipped.
    """
    dir_fd = open_dir(_lock_dir())
    try:
        count = last - first + 1
        start = secrets.randbelow(count)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        for i in range(min(count, 4096)):
            uid = first + (start + i) % count
            fd = os.open(str(uid), flags, 0o600, dir_fd=dir_fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if processes_of_uid(uid):
                os.close(fd)
                continue
            return UidLease(uid, fd)
    finally:
        os.close(dir_fd)
    raise ToolError(
        f"every uid in the python tool's session range {first}-{last} is in use; "
        "close sessions or widen PythonToolConfig.session_uid_range",
        tool="python",
    )


# -- cgroup v2 -------------------------------------------------------------------


def _cgroup2_mount() -> Path | None:
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return Path(parts[1])
    return None


def _own_cgroup() -> str | None:
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def cgroup_parent(config: PythonToolConfig) -> Path | None:
    """A cgroup v2 directory whose children get ``memory`` and ``pids``, or ``None``."""
    if config.isolation == "uid":
        return None
    if config.cgroup_parent is not None:
        candidate: Path | None = Path(config.cgroup_parent)
    else:
        mount, own = _cgroup2_mount(), _own_cgroup()
        candidate = None if mount is None or own is None else mount / own.lstrip("/")
    if candidate is None or not os.access(candidate, os.W_OK):
        return None
    try:
        available = (candidate / "cgroup.controllers").read_text().split()
        enabled = (candidate / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(available):
            return None
        missing = [c for c in ("memory", "pids") if c not in enabled]
        if missing:
            (candidate / "cgroup.subtree_control").write_text(" ".join("+" + c for c in missing))
    except OSError:
        return None
    return candidate


class SessionCgroup:
    """One session's cgroup: total memory and processes of everything in the sandbox."""

    def __init__(self, parent: Path, config: PythonToolConfig) -> None:
        self.path = parent / f"harmonia-py-{secrets.token_hex(6)}"
        self.path.mkdir(mode=0o755)
        if config.session_memory_limit is not None:
            (self.path / "memory.max").write_text(str(config.session_memory_limit))
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")
        if config.process_limit is not None:
            (self.path / "pids.max").write_text(str(config.process_limit))

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        return []

    def remove(self) -> None:
        kill = self.path / "cgroup.kill"
        with contextlib.suppress(OSError):
            if kill.exists():
                kill.write_text("1")
            else:
                for pid in self.pids():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


# -- the size-capped data drive --------------------------------------------------

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_data_drive(target: Path, size: int, owner: tuple[int, int]) -> None:
    """Mount a tmpfs of ``size`` bytes on ``target`` (root only), owned by ``owner``.

    Mode 0755: bubblewrap, root without capabilities, must traverse it (to chdir);
    nobody else can reach it, as its parent is the session root (0700).
    """
    inodes = max(4096, size // 16384)
    options = f"size={size},nr_inodes={inodes},mode=0755,uid={owner[0]},gid={owner[1]}"
    if _libc().mount(
        b"tmpfs", os.fsencode(target), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()
    ):
        err = ctypes.get_errno()
        raise ToolError(
            f"could not mount the python session's data drive ({os.strerror(err)})",
            tool="python",
        )


def unmount(target: Path) -> bool:
    """Detach the data drive; ``False`` if it could not be (it was not mounted: fine)."""
    if _libc().umount2(os.fsencode(target), _MNT_DETACH):
        return ctypes.get_errno() in (errno.EINVAL, errno.ENOENT)
    return True
