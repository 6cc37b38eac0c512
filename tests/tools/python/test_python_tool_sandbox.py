"""The sandbox, tested from inside the kernel: network, files, identity, limits, isolation."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest


def test_code_runs_as_the_unprivileged_uid_in_the_data_directory(run: Any, shared: Any) -> None:
    out = run("import os\nprint(os.getuid(), os.getgid(), os.getcwd())")
    uid = shared.session_uid
    assert uid is not None and uid != 0
    if shared.isolation in ("uid", "cgroup"):
        first, last = shared.config.session_uid_range
        assert first <= uid <= last
    assert out.text == f"{uid} {uid} /mnt/data\n"


def test_a_listener_on_the_host_loopback_is_unreachable(run: Any) -> None:
    accepted: list[object] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        code = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError as e:\n    print('failed', type(e).__name__)\n"
            "print(sorted(name for _, name in socket.if_nameindex()))\n"
        )
        out = run(code)
        stop.set()
        thread.join()
    assert out.text == "failed ConnectionRefusedError\n['lo']\n"
    assert accepted == []


def test_host_files_outside_the_sandbox_are_invisible(run: Any, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    this_test = Path(__file__).resolve()
    code = (
        "for path in [" + repr(str(secret)) + ", " + repr(str(this_test)) + ", '/etc/shadow',"
        " '/root/.bash_history']:\n"
        "    try:\n        open(path).read()\n        print('READ', path)\n"
        "    except OSError as e:\n        print(type(e).__name__)\n"
    )
    out = run(code)
    assert "READ" not in out.text
    assert out.text.count("FileNotFoundError") == 4, out.text


def test_only_the_data_directory_and_tmp_are_writable(run: Any, shared: Any) -> None:
    code = (
        "for path in ['/created-by-test', '/usr/created-by-test', '/etc/created-by-test',"
        " '/tmp/ok', '/mnt/data/ok.txt']:\n"
        "    try:\n        open(path, 'w').write('x')\n        print('wrote', path)\n"
        "    except OSError as e:\n        print('refused', path, e.strerror)\n"
    )
    out = run(code)
    assert out.text.splitlines() == [
        "refused /created-by-test Read-only file system",
        "refused /usr/created-by-test Read-only file system",
        "refused /etc/created-by-test Read-only file system",
        "wrote /tmp/ok",
        "wrote /mnt/data/ok.txt",
    ]
    assert (shared.data_dir / "ok.txt").read_text() == "x"
    assert not Path("/created-by-test").exists()


def test_a_3_gib_allocation_raises_memory_error_and_the_kernel_survives(run: Any) -> None:
    out = run("memory_hog = bytearray(3 * 1024**3)")
    assert out.metadata.get("error", "").startswith("MemoryError")
    assert run("print('still alive')").text == "still alive\n"


def test_a_fork_bomb_is_stopped_by_the_process_limit(run: Any, shared: Any) -> None:
    limit = shared.config.process_limit
    code = (
        "import os, signal, subprocess, time\n"
        "quiet = {'stdout': subprocess.DEVNULL, 'stderr': subprocess.DEVNULL}\n"
        "subprocess.run(['bash', '-c', 'bomb() { bomb | bomb & }; bomb'], timeout=5, **quiet)\n"
        "time.sleep(1.0)\n"
        "count = sum(name.isdigit() for name in os.listdir('/proc'))\n"
        "os.kill(-1, signal.SIGKILL)  # everything of ours but this kernel (and pid 1)\n"
        "print('peak', count)\n"
    )
    out = run(code)
    assert out.text.startswith("peak "), out.text
    peak = int(out.text.split()[1])
    # Processes, not threads, are listed in /proc; the limit counts both.
    assert 2 < peak <= limit
    assert run("print('kernel fine')").text == "kernel fine\n"


def test_two_sessions_share_neither_state_nor_files_nor_the_host_environment(
    aio: Any, tools: Any, sandbox: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARMONIA_TEST_API_KEY", "sk-not-for-the-sandbox")
    first, second = tools.make(), tools.make()
    aio.run(
        first.run(
            "only_in_first = 1\n"
            "open('/mnt/data/first.txt', 'w').write('1')\n"
            "open('/tmp/first.txt', 'w').write('1')"
        )
    )
    out = aio.run(
        second.run(
            "import os\nprint(os.listdir('/mnt/data'))\n"
            "print('only_in_first' in globals())\n"
            "print(os.path.exists('/tmp/first.txt'))\n"
            "print(sorted(k for k in os.environ if 'API_KEY' in k or k.startswith('JPY_')))"
        )
    )
    assert out.text == "[]\nFalse\nFalse\n[]\n"
    assert first.data_dir != second.data_dir
    assert (first.data_dir / "first.txt").exists()
    assert not (second.data_dir / "first.txt").exists()
    tools.close(first)
    tools.close(second)


def test_processes_a_call_leaves_running_are_stopped_and_the_model_is_told(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make()
    out = aio.run(
        tool.run(
            "import os, subprocess, time\n"
            "child = subprocess.Popen(['sleep', '300'])\n"
            "subprocess.run(['bash', '-c', 'setsid sleep 300 & disown'])\n"
            "def sleepers():\n"
            "    pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "    return [p for p in pids if open(f'/proc/{p}/comm').read() == 'sleep\\n']\n"
            "for _ in range(400):\n"
            "    if len(sleepers()) == 2:\n"
            "        break\n"
            "    time.sleep(0.05)\n"
            "print('started', len(sleepers()))"
        )
    )
    assert out.text.startswith("started 2\n"), out.text
    assert "2 process(es) this call started were still running" in out.text
    assert out.metadata["processes_stopped"] == 2
    top = psutil.Process(tool.kernel_pid)
    alive = [p for p in top.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert [p.name() for p in alive] == ["bwrap", "python"]
    # The kernel itself is kept, and so is its state.
    again = aio.run(tool.run("print(child.poll())"))
    assert again.text == "-9\n"
    tools.close(tool)


def test_closing_a_session_leaves_no_process_behind(aio: Any, tools: Any, sandbox: None) -> None:
    tool = tools.make()
    aio.run(
        tool.run(
            "import threading, time\n"
            "threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
        )
    )
    processes = [psutil.Process(tool.kernel_pid)]
    processes += processes[0].children(recursive=True)
    assert len(processes) == 3  # bubblewrap, its init, the kernel
    data_dir, root = tool.data_dir, tool.data_dir.parent
    aio.run(tool.aclose())
    _, alive = psutil.wait_procs(processes, timeout=5)
    assert alive == []
    assert not data_dir.exists() and not root.exists()
