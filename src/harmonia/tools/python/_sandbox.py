"""The bubblewrap command line that confines a kernel, and the probe that tries it.

The sandbox, from the outside in (see docs/python-tool.md for the reasons):

* new mount, PID, network, IPC and UTS namespaces: no network at all (only a
  loopback with nothing on it), no view of host processes;
* a fresh root holding, read-only, ``/usr``, the interpreter's prefixes and the
  few ``/etc`` files programs need; nothing else of the host exists inside;
* writable: the session's data directory at ``/mnt/data`` and a private
  size-capped ``/tmp``; the root itself is remounted read-only;
* the kernel runs as an unprivileged uid with no capabilities and
  ``no_new_privs``, under resource limits set by ``_launcher.py``;
* a clean environment (no host variables, so no API keys leak in).

When the host process is root, bubblewrap runs without a user namespace (as
root it can bind directories that only root may traverse, such as a pyenv
under ``/root``) and the launcher drops to the unprivileged uid; otherwise
bubblewrap maps the caller into a user namespace.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harmonia._errors import install_hint
from harmonia._runtime import TIMEOUTS

from ._config import PythonToolConfig

SANDBOX_DATA_DIR = "/mnt/data"
SANDBOX_HOSTNAME = "sandbox"
#: The /etc files each session writes for itself (write_identity_files).
IDENTITY_FILES = ("passwd", "group", "hosts", "hostname")
LAUNCHER_PATH = Path(__file__).with_name("_launcher.py")
KERNEL_MAIN_PATH = Path(__file__).with_name("_kernel_main.py")
_LAUNCHER_INSIDE = "/run/harmonia-launcher.py"
_KERNEL_MAIN_INSIDE = "/run/harmonia-kernel.py"
# Files under /etc that ordinary programs read (the dynamic loader, users and
# groups for getpwuid, time zone, TLS roots, fonts); the rest of /etc stays out.
# hosts and hostname are the sandbox's own (write_identity_files): the host's
# name the host, and its network's other machines.
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "alternatives",
    "ssl",
    "ca-certificates",
    "fonts",
    "mime.types",
)
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "IPYTHONDIR": "/tmp/.ipython",
    "MPLCONFIGDIR": "/tmp/.matplotlib",
    "PYTHONDONTWRITEBYTECODE": "1",
    # Fewer malloc arenas: each reserves 64 MiB of address space per thread,
    # which RLIMIT_AS counts (a kernel could not start under 256 MiB without it).
    "MALLOC_ARENA_MAX": "2",
    # One thread per numeric library: threads count against the process limit.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_KERNEL_ARGS = (
    "-f",
    "{connection_file}",
    # Tracebacks without ANSI colours (the runtime strips any left anyway).
    "--InteractiveShell.colors=nocolor",
    # No sqlite history file: nothing to write, nothing to lock.
    "--HistoryManager.hist_file=:memory:",
)


@dataclass(frozen=True)
class SandboxStatus:
    """Whether the python tool's sandbox can start here, and if not, why and how to fix it."""

    ok: bool
    reason: str


@dataclass(frozen=True)
class SessionDirs:
    """The host directories of one kernel of a session.

    ``data`` is the data drive (``/mnt/data``); ``kernel`` a directory made
    afresh for each kernel start that the sandbox sees read-only and that
    holds the connection file, with ``kernel/ipc`` for the kernel's sockets;
    ``etc`` holds the ``passwd``, ``group``, ``hosts`` and ``hostname`` files
    shown inside.
    """

    data: Path
    kernel: Path
    etc: Path | None = None

    @property
    def ipc(self) -> Path:
        return self.kernel / "ipc"

    @property
    def connection_file(self) -> Path:
        return self.kernel / "kernel.json"


@dataclass(frozen=True)
class Identity:
    """Who the kernel runs as, and the cgroup it starts in (if any)."""

    uid: int
    gid: int
    cgroup_procs: str | None = None


def host_is_root() -> bool:
    return os.geteuid() == 0


def prepare_kernel_dir(kernel: Path, owner: tuple[int, int] | None) -> None:
    """A fresh kernel directory: ours, readable; its ``ipc`` writable by the kernel for now.

    Once the kernel has bound its sockets :func:`seal_ipc_dir` takes ``ipc``
    back, so the sandbox can no longer replace a socket with a symlink that
    the host's client would follow on a reconnect.
    """
    kernel.mkdir(mode=0o755)
    os.chmod(kernel, 0o755)
    ipc = kernel / "ipc"
    ipc.mkdir(mode=0o700)
    if owner is not None:
        os.chown(ipc, *owner)  # a directory we just made, inside one only we can write


def seal_ipc_dir(kernel: Path) -> None:
    """Make the kernel's socket directory ours and read-only to the kernel; check its entries."""
    import stat as _stat

    ipc = kernel / "ipc"
    if host_is_root():
        os.chown(ipc, 0, 0)
    os.chmod(ipc, 0o755)
    for entry in os.scandir(ipc):
        mode = entry.stat(follow_symlinks=False).st_mode
        if not _stat.S_ISSOCK(mode):
            os.unlink(entry.path)  # removes the entry; a link is not followed


def write_identity_files(etc: Path, uid: int, gid: int) -> None:
    """The ``passwd`` and ``group`` the sandbox sees: its own user and nothing of the host's."""
    etc.mkdir(mode=0o755, exist_ok=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"sandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n")
    # The sandbox's own names: only loopback (it has no other network) and its
    # hostname (set by bubblewrap's --hostname), nothing that names the host.
    (etc / "hosts").write_text(
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{SANDBOX_HOSTNAME}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    (etc / "hostname").write_text(SANDBOX_HOSTNAME + "\n")


@functools.lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """The directories an interpreter needs to run, found by asking it (isolated mode)."""
    script = (
        "import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix,"
        " sys.base_exec_prefix, os.path.dirname(os.path.realpath(sys.executable)), *sys.path]))"
    )
    done = subprocess.run(
        [python, "-I", "-c", script],
        capture_output=True,
        text=True,
        timeout=TIMEOUTS.interpreter_probe,
        check=True,
    )
    found: list[str] = json.loads(done.stdout)
    return tuple(found)


def _read_only_roots(python: str) -> list[str]:
    """Distinct existing paths to bind read-only, none inside another or under /usr.

    Files count too: a ``sys.path`` entry may be a zip archive or an egg.
    """
    candidates = sorted(
        {os.path.realpath(p) for p in interpreter_paths(python) if p and os.path.exists(p)}
    )
    roots: list[str] = []
    for path in candidates:
        if path == "/usr" or path.startswith("/usr/"):
            continue
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            continue
        roots.append(path)
    return roots


class _Argv:
    """Builds a bwrap command line, creating each mount point's parents world-readable.

    bubblewrap creates missing parent directories with mode 0700; a kernel
    running as another uid could then not traverse them.
    """

    def __init__(self) -> None:
        self.args: list[str] = ["bwrap"]
        self._made: set[str] = {"/"}

    def made(self, path: str) -> None:
        """Record a directory the command line creates by other means (a tmpfs)."""
        self._made.add(path)

    def parents(self, target: str) -> None:
        parts = Path(target).parts[1:-1]
        current = ""
        for part in parts:
            current = f"{current}/{part}"
            if current not in self._made:
                self.args += ["--perms", "0755", "--dir", current]
                self._made.add(current)

    def bind(self, option: str, source: str, target: str) -> None:
        self.parents(target)
        self.args += [option, source, target]
        self.made(target)


def _kernel_settings(config: PythonToolConfig) -> str:
    return json.dumps(
        {"budget": config.max_output_chars, "max_image_bytes": config.max_image_bytes},
        sort_keys=True,
    )


def bwrap_argv(
    config: PythonToolConfig,
    dirs: SessionDirs,
    python: str,
    command: list[str],
    who: Identity,
) -> list[str]:
    """The full command that starts ``command`` (run by ``python``) inside the sandbox."""
    a = _Argv()
    # /tmp first: a tmpfs mounted later would hide the session binds below it.
    a.args += ["--size", str(config.tmp_size), "--perms", "1777", "--tmpfs", "/tmp"]
    a.made("/tmp")
    a.bind("--ro-bind", "/usr", "/usr")
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            a.args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            a.bind("--ro-bind", str(host), str(host))
    for name in _ETC:
        a.bind("--ro-bind-try", f"/etc/{name}", f"/etc/{name}")
    if dirs.etc is not None:
        for name in IDENTITY_FILES:
            a.bind("--ro-bind", str(dirs.etc / name), f"/etc/{name}")
    for root in _read_only_roots(python):
        a.bind("--ro-bind", root, root)
    a.bind("--ro-bind", str(LAUNCHER_PATH), _LAUNCHER_INSIDE)
    a.bind("--ro-bind", str(KERNEL_MAIN_PATH), _KERNEL_MAIN_INSIDE)
    a.bind("--bind", str(dirs.data), SANDBOX_DATA_DIR)
    a.bind("--ro-bind", str(dirs.kernel), str(dirs.kernel))
    a.bind("--bind", str(dirs.ipc), str(dirs.ipc))
    a.args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", "--chdir", SANDBOX_DATA_DIR]
    if host_is_root():
        # No user namespace: the launcher drops to the session's uid itself and
        # needs exactly these two capabilities to do so (it loses them with the uid).
        a.args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        a.args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        a.args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        a.args += ["--unshare-all", "--unshare-user", "--unshare-net", "--cap-drop", "ALL"]
        a.args += ["--uid", str(who.uid), "--gid", str(who.gid)]
    a.args += ["--hostname", SANDBOX_HOSTNAME, "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in _ENV.items():
        a.args += ["--setenv", key, value]
    settings: dict[str, object] = {"rlimits": config.rlimits(), "uid": who.uid, "gid": who.gid}
    if command == ["--check"]:
        settings["check"] = True
        command = []
    else:
        command = [python, _KERNEL_MAIN_INSIDE, _kernel_settings(config), *command]
    launcher = [python, "-I", _LAUNCHER_INSIDE, json.dumps(settings, sort_keys=True)]
    argv = [*a.args, "--", *launcher, "--", *command]
    if who.cgroup_procs is not None:
        # Enter the session's cgroup before bubblewrap starts, so that every
        # process of the sandbox is counted from the first.
        enter = json.dumps({"enter_cgroup": who.cgroup_procs})
        argv = [python, "-I", str(LAUNCHER_PATH), enter, "--", *argv]
    return argv


def kernel_argv(
    config: PythonToolConfig, dirs: SessionDirs, python: str, who: Identity | None
) -> list[str]:
    """The kernel spec's argv: sandboxed when ``who`` is given, else the bare launcher."""
    kernel_args = list(_KERNEL_ARGS)
    if who is not None:
        return bwrap_argv(config, dirs, python, kernel_args, who)
    settings = json.dumps({"rlimits": config.rlimits(), "uid": None, "gid": None})
    kernel = [python, str(KERNEL_MAIN_PATH), _kernel_settings(config), *kernel_args]
    return [python, "-I", str(LAUNCHER_PATH), settings, "--", *kernel]


def kernel_env(home: Path) -> dict[str, str]:
    """The environment of an unsandboxed kernel: the sandbox's, not the host's secrets."""
    return dict(
        _ENV, HOME=str(home), IPYTHONDIR=str(home / ".ipython"), MPLCONFIGDIR=str(home / ".mpl")
    )


_HOW_TO_OPT_OUT = (
    "To run the kernel without isolation anyway (your user, your files, your network), "
    "pass PythonToolConfig(dangerously_allow_unsandboxed=True) -- only for code you trust."
)


def _refused(reason: str) -> SandboxStatus:
    return SandboxStatus(False, f"{reason} {_HOW_TO_OPT_OUT}")


@functools.lru_cache(maxsize=8)
def _probe(python: str, uid: int, gid: int) -> SandboxStatus:
    if not sys.platform.startswith("linux"):
        return _refused(
            f"the python tool's sandbox needs Linux with bubblewrap; this is {sys.platform}."
        )
    missing = [m for m in ("jupyter_client", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        hint = install_hint("python")
        return SandboxStatus(
            False, f"{' and '.join(missing)} not installed: install them with {hint}"
        )
    if shutil.which("bwrap") is None:
        return _refused(
            "bubblewrap (`bwrap`) is not installed: install it (Debian/Ubuntu: "
            "`apt-get install bubblewrap`, Fedora: `dnf install bubblewrap`)."
        )
    config = PythonToolConfig(sandbox_uid=uid, sandbox_gid=gid)
    with tempfile.TemporaryDirectory(prefix="harmonia-probe-") as tmp:
        etc = Path(tmp) / "etc"
        dirs = SessionDirs(Path(tmp) / "data", Path(tmp) / "kernel", etc)
        dirs.data.mkdir()
        os.chmod(tmp, 0o755)
        owner = (uid, gid) if host_is_root() else None
        if owner is not None:
            os.chown(dirs.data, *owner)
        prepare_kernel_dir(dirs.kernel, owner)
        write_identity_files(etc, uid, gid)
        try:
            argv = bwrap_argv(config, dirs, python, ["--check"], Identity(uid, gid))
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=TIMEOUTS.sandbox_probe
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return _refused(f"the sandbox probe could not run: {exc}.")
    if done.returncode != 0 or done.stdout.strip() != str(uid):
        detail = (done.stderr.strip() or done.stdout.strip() or "no output")[-600:]
        return _refused(
            f"bubblewrap could not start the sandbox (exit {done.returncode}: {detail}). "
            "Common causes: unprivileged user namespaces are disabled (sysctl "
            "kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0; Ubuntu 23.10+ "
            "restricts them through AppArmor: kernel.apparmor_restrict_unprivileged_userns=0), "
            "a container whose seccomp profile forbids namespaces (run it with a profile that "
            f"allows them), or an interpreter ({python}) the sandbox user cannot read."
        )
    return SandboxStatus(True, f"bubblewrap sandbox available (kernel uid {uid})")


def sandbox_status(config: PythonToolConfig | None = None) -> SandboxStatus:
    """Try to start the sandbox once (cached) and say whether it works and, if not, why.

    This is what :class:`PythonTool` checks before it starts a kernel, and what
    its tests print when they skip.
    """
    config = config or PythonToolConfig()
    python = config.python or sys.executable
    return _probe(python, config.sandbox_uid, config.sandbox_gid)
