"""The escape suite: code a hostile model could write, run against the sandbox.

Every attempt prints ``ESCAPED`` if it got what it was after; none may. After
each, the host's sentinels are checked -- a file (content, mode, owner), a
process, TCP, UDP, Unix and abstract-Unix listeners (nothing from the sandbox
reached them, and they still answer the host) and a second session with state
of its own -- and the attacked session must answer its next call (or say
clearly that its state was lost).

Every attempt is bounded: the arena session runs under small limits (a 3 s
timeout, 32 processes, 512 MiB per process, a 16 MiB data drive and /tmp, 8
MiB files), so exhaustion attempts hit their limit quickly and nothing here
fills the host's disk or memory.
"""

from __future__ import annotations

import os
import secrets
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import psutil
import pytest

from harmonia.tools.python import PythonTool
from harmonia.tools.python._session import processes_of_uid

SECRET_NAME = "HARMONIA_ESCAPE_TEST_SECRET"
SECRET_VALUE = "sk-escape-" + secrets.token_hex(8)
MIB = 1024 * 1024
ARENA_LIMITS: dict[str, Any] = {
    "memory_limit": 512 * MIB,
    "process_limit": 32,
    "data_size_limit": 16 * MIB,
    "tmp_size": 16 * MIB,
    "file_size_limit": 8 * MIB,
    "open_files_limit": 256,
    "max_output_chars": 2000,
    "max_image_bytes": 1 * MIB,
    "max_message_bytes": 4 * MIB,
    "max_images_per_call": 4,
}


class Listener:
    """A host listener that counts who connected; the host probes it after each attempt."""

    def __init__(self, family: int, kind: int, address: Any) -> None:
        self.sock = socket.socket(family, kind)
        self.sock.bind(address)
        self.kind = kind
        self.received = 0
        if kind == socket.SOCK_STREAM:
            self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, _ = self.sock.accept()
                    conn.close()
                else:
                    self.sock.recv(65536)
                self.received += 1
            except OSError:
                continue

    def probe(self) -> None:
        """Connect from the host: the listener must still serve (and count it)."""
        family = self.sock.family
        with socket.socket(family, self.kind) as client:
            if self.kind == socket.SOCK_STREAM:
                client.settimeout(5)
                client.connect(self.address)
            else:
                client.sendto(b"probe", self.address)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@dataclass
class Arena:
    """The host-side sentinels and the two sessions."""

    tool: PythonTool
    neighbour: PythonTool
    victim_dir: Path
    victim: Path
    sentinel: subprocess.Popen[bytes]
    listeners: list[Listener]
    params: dict[str, Any] = field(default_factory=dict)
    probes: int = 0

    def check(self, aio: Any) -> None:
        info = self.victim.lstat()
        assert self.victim.read_text() == "sentinel"
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o644
        assert (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid())
        assert sorted(p.name for p in self.victim_dir.iterdir()) == ["app.sock", "victim.txt"]
        assert self.sentinel.poll() is None, "the host's sentinel process was killed"
        self.probes += 1
        for listener in self.listeners:
            listener.probe()
        deadline = 50
        while deadline and any(x.received < self.probes for x in self.listeners):
            threading.Event().wait(0.1)
            deadline -= 1
        # Exactly the host's own probes reached them: nothing from the sandbox.
        assert [x.received for x in self.listeners] == [self.probes] * len(self.listeners)
        after = aio.run(self.tool.run("print('alive')"))
        assert after.text.endswith("alive\n"), after.text
        if after.text != "alive\n":
            assert "were lost" in after.text, after.text
        neighbour = aio.run(self.neighbour.run("print(neighbour_state)"))
        assert neighbour.text in ("kept\n",), neighbour.text


def _host_addresses() -> list[str]:
    found = ["127.0.0.1"]
    for addresses in psutil.net_if_addrs().values():
        found += [a.address for a in addresses if a.family == socket.AF_INET]
    return sorted(set(found))


@pytest.fixture(scope="module")
def arena(aio: Any, tools: Any, sandbox: None, tmp_path_factory: Any) -> Iterator[Arena]:
    victim_dir = tmp_path_factory.mktemp("escape-sentinels")
    victim_dir.chmod(0o755)
    victim = victim_dir / "victim.txt"
    victim.write_text("sentinel")
    victim.chmod(0o644)
    abstract = f"\0harmonia-escape-{secrets.token_hex(4)}"
    listeners = [
        Listener(socket.AF_INET, socket.SOCK_STREAM, ("0.0.0.0", 0)),
        Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(victim_dir / "app.sock")),
        Listener(socket.AF_UNIX, socket.SOCK_STREAM, abstract),
    ]
    port = listeners[0].address[1]
    listeners.append(Listener(socket.AF_INET, socket.SOCK_DGRAM, ("0.0.0.0", port)))
    for listener in listeners[:3]:
        if listener.sock.family == socket.AF_INET:
            listener.address = ("127.0.0.1", port)
    listeners[3].address = ("127.0.0.1", port)
    sentinel = subprocess.Popen(["sleep", "600"])
    os.environ[SECRET_NAME] = SECRET_VALUE
    try:
        tool = tools.make(**ARENA_LIMITS)
        neighbour = tools.make(**ARENA_LIMITS)
        aio.run(neighbour.run("neighbour_state = 'kept'\nopen('secret.txt', 'w').write('n')"))
        aio.run(tool.start())
        neighbour_kernel = neighbour._kernel
        assert neighbour_kernel is not None and neighbour_kernel._dirs is not None
        made = Arena(tool, neighbour, victim_dir, victim, sentinel, listeners)
        made.params = {
            "victim": repr(str(victim)),
            "victim_dir": repr(str(victim_dir)),
            "port": port,
            "hosts": repr(_host_addresses()),
            "unix_path": repr(str(victim_dir / "app.sock")),
            "abstract": repr(abstract),
            "sentinel_pid": sentinel.pid,
            "secret_name": repr(SECRET_NAME),
            "secret_value": repr(SECRET_VALUE),
            "neighbour_pid": neighbour.kernel_pid,
            "neighbour_uid": neighbour.session_uid,
            "neighbour_data": repr(str(neighbour.data_dir)),
            "neighbour_conn": repr(str(neighbour_kernel._dirs.connection_file)),
        }
        made.check(aio)
        yield made
    finally:
        os.environ.pop(SECRET_NAME, None)
        sentinel.kill()
        sentinel.wait()
        for listener in listeners:
            listener.close()


def attempt(name: str, code: str, expect: str | None = None) -> Any:
    return pytest.param(code, expect, id=name)


TRY = "try:\n    {}\n    print('ESCAPED')\nexcept Exception as e:\n    print('refused', e)\n"


def refused(statement: str) -> str:
    """Code that runs ``statement`` and prints ESCAPED if it does not raise."""
    return TRY.format(statement)


ATTEMPTS = [
    # -- network ---------------------------------------------------------------
    attempt(
        "net-tcp-loopback",
        refused("__import__('socket').create_connection(('127.0.0.1', $port), 1)"),
    ),
    attempt(
        "net-tcp-every-host-address",
        "import socket\nfor host in $hosts:\n"
        "    try:\n        socket.create_connection((host, $port), 1)\n"
        "        print('ESCAPED', host)\n"
        "    except OSError:\n        pass\n",
    ),
    attempt("net-dns", refused("__import__('socket').getaddrinfo('example.com', 443)")),
    attempt(
        "net-udp-to-host-port",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for host in $hosts:\n    try:\n        s.sendto(b'x', (host, $port))\n"
        "    except OSError:\n        pass\n",
    ),
    attempt("net-raw-packet-socket", refused("__import__('socket').socket(17, 3, 0)")),
    attempt(
        "net-only-loopback-interface",
        "import socket\nif sorted(n for _, n in socket.if_nameindex()) != ['lo']:\n"
        "    print('ESCAPED')\n",
    ),
    attempt(
        "net-unix-socket-path",
        refused("s = __import__('socket').socket(1); s.connect($unix_path)"),
    ),
    attempt(
        "net-abstract-unix-socket",
        refused("s = __import__('socket').socket(1); s.connect($abstract)"),
    ),
    # -- host files -------------------------------------------------------------
    attempt("files-read-victim", refused("open($victim).read()")),
    attempt(
        "files-read-host-secrets",
        "for p in ['/etc/shadow', '/root/.ssh/id_rsa', '/etc/ssh/ssh_host_ed25519_key',"
        " '/proc/1/root/etc/shadow', '/root/.bash_history']:\n"
        "    try:\n        open(p).read()\n        print('ESCAPED', p)\n"
        "    except Exception:\n        pass\n",
    ),
    attempt(
        "files-write-system-paths",
        "for p in ['/x', '/usr/x', '/etc/x', '/bin/x', '/run/harmonia-launcher.py',"
        " '/run/harmonia-kernel.py', '/etc/passwd']:\n"
        "    try:\n        open(p, 'a').write('x')\n        print('ESCAPED', p)\n"
        "    except Exception:\n        pass\n",
    ),
    attempt(
        "files-host-tree-invisible",
        "import os\nfor p in [$victim_dir, '/home', '/var/lib', '/srv', '/boot', '/sys/fs']:\n"
        "    if os.path.exists(p):\n        print('ESCAPED', p)\n",
    ),
    attempt(
        "files-proc-root-of-init",
        "import os\ntry:\n    entries = os.listdir('/proc/1/root')\n"
        "    if os.path.exists('/proc/1/root' + $victim):\n        print('ESCAPED')\n"
        "except OSError as e:\n    print('refused', e)\n",
    ),
    attempt(
        "files-host-process-invisible",
        "import os\ntry:\n    if b'600' in open('/proc/$sentinel_pid/cmdline', 'rb').read():\n"
        "        print('ESCAPED')\nexcept OSError:\n    pass\n",
    ),
    attempt(
        "files-symlinks-at-predicted-image-names",
        "import os, base64\nfrom IPython.display import display\n"
        "for c in range(1, 60):\n    for n in range(1, 5):\n"
        "        for ext in ('png', 'svg'):\n"
        "            try:\n                os.symlink($victim, f'/mnt/data/output_{c}_{n}.{ext}')\n"
        "            except FileExistsError:\n                pass\n"
        "display({'image/png': base64.b64encode(b'PNGDATA').decode()}, raw=True)\n"
        "display({'image/svg+xml': '<svg/>'}, raw=True)\n",
        "[image saved to /mnt/data/output_",
    ),
    attempt(
        "files-hard-links-at-predicted-image-names",
        "import os, base64\nfrom IPython.display import display\n"
        "open('/mnt/data/keep', 'w').write('keep')\n"
        "for c in range(1, 60):\n    for n in range(1, 5):\n"
        "        try:\n            os.link('/mnt/data/keep', f'/mnt/data/output_{c}_{n}.png')\n"
        "        except FileExistsError:\n            pass\n"
        "display({'image/png': base64.b64encode(b'PNGDATA').decode()}, raw=True)\n"
        "if open('/mnt/data/keep').read() != 'keep':\n    print('ESCAPED')\n",
        "[image saved to /mnt/data/output_",
    ),
    attempt(
        "files-fifos-at-predicted-image-names",
        "import os, base64\nfrom IPython.display import display\n"
        "for c in range(1, 60):\n    try:\n        os.mkfifo(f'/mnt/data/output_{c}_1.gif')\n"
        "    except FileExistsError:\n        pass\n"
        "display({'image/gif': base64.b64encode(b'GIF89a').decode()}, raw=True)\n",
        "[image saved to /mnt/data/output_",
    ),
    attempt(
        "files-connection-file-and-sockets",
        "import os, sys\nconn = sys.argv[sys.argv.index('-f') + 1]\n"
        "ipc = os.path.join(os.path.dirname(conn), 'ipc')\n"
        "for act in [lambda: open(conn, 'w'), lambda: os.rename(conn, conn + '.x'),\n"
        "            lambda: os.symlink($victim, os.path.join(ipc, 'x')),\n"
        "            lambda: os.unlink(os.path.join(ipc, os.listdir(ipc)[0]))]:\n"
        "    try:\n        act()\n        print('ESCAPED')\n    except OSError:\n        pass\n",
    ),
    attempt(
        "files-mknod-block-device", refused("__import__('os').mknod('/tmp/sda', 0o60600, 2048)")
    ),
    attempt(
        "files-raw-devices",
        "for p in ['/dev/mem', '/dev/kmem', '/dev/sda', '/dev/vda', '/dev/kmsg']:\n"
        "    try:\n        open(p, 'rb').read(1)\n        print('ESCAPED', p)\n"
        "    except Exception:\n        pass\n",
    ),
    attempt(
        "files-replace-the-data-mount",
        "import os\nfor act in [lambda: os.rename('/mnt/data', '/tmp/d'), lambda: os.rmdir('/mnt'),"
        " lambda: os.symlink('/', '/mnt/x')]:\n"
        "    try:\n        act()\n        print('ESCAPED')\n    except OSError:\n        pass\n",
    ),
    # -- /proc and mounts -------------------------------------------------------------
    attempt(
        "mount-tmpfs",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.mount(b'none', b'/mnt', b'tmpfs', 0, None) == 0:\n    print('ESCAPED')\n",
    ),
    attempt(
        "mount-remount-root-writable",
        "import subprocess\nr = subprocess.run(['mount', '-o', 'remount,rw', '/'],"
        " capture_output=True)\n"
        "if r.returncode == 0:\n    print('ESCAPED')\n",
    ),
    attempt(
        "mount-nested-user-namespace-sees-nothing-more",
        "import subprocess\nr = subprocess.run(['unshare', '-Urm', 'sh', '-c',"
        " 'mount -t proc proc /proc 2>/dev/null; cat ' + $victim + ' 2>/dev/null;"
        " ls /proc | head -c 0'], capture_output=True, text=True, timeout=5)\n"
        "if 'sentinel' in r.stdout:\n    print('ESCAPED')\n",
    ),
    attempt("proc-chroot", refused("__import__('os').chroot('/tmp')")),
    attempt("proc-setuid-root", refused("__import__('os').setuid(0)")),
    attempt(
        "proc-capabilities-and-no-new-privs",
        "status = open('/proc/self/status').read()\n"
        "if 'CapEff:\\t0000000000000000' not in status or 'NoNewPrivs:\\t1' not in status:\n"
        "    print('ESCAPED')\n",
    ),
    attempt(
        "proc-setuid-binary",
        "import subprocess\nr = subprocess.run(['su', '-c', 'id -u'], capture_output=True,"
        " text=True, input='', timeout=5)\n"
        "if r.stdout.strip() == '0':\n    print('ESCAPED')\n",
    ),
    attempt("proc-sys-write", refused("open('/proc/sys/kernel/hostname', 'w').write('pwned')")),
    attempt("proc-sysrq", refused("open('/proc/sysrq-trigger', 'w').write('h')")),
    attempt(
        "proc-ptrace-init",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, 1, None, None) == 0:\n    print('ESCAPED')\n",
    ),
    # -- secrets in the environment ---------------------------------------------------
    attempt(
        "env-own-environment",
        "import os\nif $secret_name in os.environ or $secret_value in str(os.environ):\n"
        "    print('ESCAPED')\n",
    ),
    attempt(
        "env-every-visible-process",
        "import os\nfor pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    for part in ('environ', 'cmdline'):\n"
        "        try:\n            data = open(f'/proc/{pid}/{part}', 'rb').read()\n"
        "        except OSError:\n            continue\n"
        "        if $secret_value.encode() in data:\n            print('ESCAPED', pid)\n",
    ),
    # -- signals to host processes ------------------------------------------------------
    attempt(
        "sig-kill-the-host-sentinel-by-pid",
        refused("__import__('os').kill($sentinel_pid, 9)"),
    ),
    attempt(
        "sig-kill-everything-visible",
        "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"
        "print('still here')\n",
    ),
    attempt(
        "sig-kill-every-pid-number",
        "import os\nfor pid in range(1, 5000):\n    if pid != os.getpid():\n"
        "        try:\n            os.kill(pid, 9)\n        except OSError:\n            pass\n",
    ),
    attempt(
        "sig-kill-the-kernel-itself", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    ),
    # -- resource exhaustion -------------------------------------------------------------
    attempt(
        "res-fork-bomb",
        "import subprocess, time\nsubprocess.Popen(['bash', '-c', 'b() { b | b & }; b'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\ntime.sleep(1)\n",
    ),
    attempt("res-memory", refused("bytearray(2 * 1024**3)")),
    attempt(
        "res-memory-in-children",
        "import subprocess\nps = [subprocess.Popen(['python3', '-c',"
        " 'import time; b = bytearray(300 * 2**20); time.sleep(0.3)']) for _ in range(3)]\n"
        "print([p.wait() for p in ps])\n",
    ),
    attempt(
        "res-fill-the-data-drive",
        "import os\nfd = os.open('/mnt/data/big', os.O_CREAT | os.O_WRONLY)\n"
        "try:\n    os.posix_fallocate(fd, 0, 100 * 1024**3)\n    print('ESCAPED')\n"
        "except OSError:\n    pass\nos.close(fd)\nos.unlink('/mnt/data/big')\n",
    ),
    attempt(
        "res-fill-tmp",
        "import os\ntotal = 0\ntry:\n    with open('/tmp/big', 'wb') as f:\n"
        "        for _ in range(64):\n            f.write(bytes(1 << 20))\n            f.flush()\n"
        "            total += 1\n    print('ESCAPED')\nexcept OSError:\n    pass\n"
        "os.unlink('/tmp/big')\n",
    ),
    attempt(
        "res-inodes",
        "import os\nos.makedirs('/mnt/data/many', exist_ok=True)\ntry:\n"
        "    for i in range(200_000):\n        open(f'/mnt/data/many/{i}', 'w').close()\n"
        "    print('ESCAPED')\nexcept OSError:\n    pass\n"
        "import shutil\nshutil.rmtree('/mnt/data/many')\n",
    ),
    attempt("res-open-files", refused("fds = [open('/dev/null') for _ in range(100_000)]")),
    attempt(
        "res-threads",
        refused(
            "import threading, time\nts = [threading.Thread(target=time.sleep, args=(2,))"
            " for _ in range(500)]\n    [t.start() for t in ts]"
        ).replace("\nts", "\n    ts"),
    ),
    attempt("res-busy-loop", "while True:\n    pass\n"),
    attempt(
        "res-loop-ignoring-interrupts",
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n",
    ),
    attempt(
        "res-background-process-outliving-the-call",
        "import subprocess\n"
        "subprocess.Popen(['bash', '-c', 'trap \"\" TERM HUP; setsid sleep 600 &'])\n"
        "import time; time.sleep(0.3)\n",
        "processes do not outlive the call",
    ),
    # -- sessions attacking each other ----------------------------------------------------
    attempt(
        "sess-signal-the-neighbour",
        "import os\nfor pid in ($neighbour_pid, -1):\n"
        "    try:\n        os.kill(pid, 9)\n    except OSError:\n        pass\n"
        "try:\n    os.setuid($neighbour_uid)\n    print('ESCAPED')\nexcept OSError:\n    pass\n",
    ),
    attempt(
        "sess-read-the-neighbours-files",
        "import os\npaths = [$neighbour_data + '/secret.txt', $neighbour_conn]\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "paths += [f'/proc/{p}/root/mnt/data/secret.txt' for p in pids]\n"
        "for p in paths:\n    try:\n        open(p).read()\n        print('ESCAPED', p)\n"
        "    except OSError:\n        pass\n",
    ),
    # -- output floods --------------------------------------------------------------------
    attempt("out-one-huge-print", "print('x' * 50_000_000)", "characters omitted"),
    attempt("out-many-lines", "for i in range(100_000):\n    print(i)", "characters omitted"),
    attempt(
        "out-raw-fd-writes",
        "import os\nfor _ in range(100):\n"
        "    os.write(1, b'y' * 100_000)\n    os.write(2, b'z' * 1000)",
        "characters omitted",
    ),
    attempt(
        "out-subprocess-flood",
        "import subprocess\nsubprocess.run(['head', '-c', '20000000', '/dev/zero'])",
        "characters omitted",
    ),
    attempt("out-huge-exception", "raise RuntimeError('e' * 5_000_000)", "characters omitted"),
    attempt("out-huge-repr", "'r' * 5_000_000", "characters omitted"),
    attempt(
        "out-image-flood",
        "import base64\nfrom IPython.display import display\n"
        "for _ in range(12):\n"
        "    display({'image/png': base64.b64encode(b'P' * 100).decode()}, raw=True)",
        "a call may save at most 4 images",
    ),
    attempt(
        "out-oversized-image",
        "import base64\nfrom IPython.display import display\n"
        "display({'image/png': base64.b64encode(bytes(3 * 2**20)).decode()}, raw=True)",
        "over the limit of 1.0 MiB per image",
    ),
    attempt(
        "out-message-past-the-guard",
        "k = get_ipython().kernel\nk.session.send(k.iopub_socket, 'stream',"
        " {'name': 'stdout', 'text': 'x' * 10**7}, parent=k.get_parent('shell'))",
        "larger than the 4194304 bytes the tool accepts",
    ),
]


def test_the_suite_has_at_least_40_attempts() -> None:
    assert len(ATTEMPTS) >= 40


@pytest.mark.parametrize(("code", "expect"), ATTEMPTS)
def test_escape_attempt(arena: Arena, aio: Any, code: str, expect: str | None) -> None:
    out = aio.run(arena.tool.run(Template(code).substitute(arena.params)), 120)
    assert "ESCAPED" not in out.text, out.text
    if expect is not None:
        assert expect in out.text, out.text
    arena.check(aio)


def test_links_in_the_data_drive_are_not_followed_when_a_session_closes(
    aio: Any, tools: Any, sandbox: None, tmp_path: Path
) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file.txt").write_text("kept")
    tool = tools.make(**ARENA_LIMITS)
    aio.run(
        tool.run(
            "import os\n"
            f"os.symlink({str(keep)!r}, '/mnt/data/dir-link')\n"
            f"os.symlink({str(keep / 'file.txt')!r}, '/mnt/data/file-link')\n"
            "os.makedirs('/mnt/data/a/b')\n"
            f"os.symlink({str(keep)!r}, '/mnt/data/a/b/deep-link')\n"
        )
    )
    uid = tool.session_uid
    tools.close(tool)
    assert (keep / "file.txt").read_text() == "kept"
    assert uid is None or processes_of_uid(uid) == []
