"""The python tool's weak points found by attacking it (issue 22 items 1-5), each refused now.

1. host file write through a symlink at an image's name; the kernel's own
   connection file and sockets, which the host also touches;
2. images larger than any limit, and without number;
3. no total limits per session: the data drive, one session's processes
   starving another's, processes outliving the call;
4. output the model never learns it lost;
5. a kernel that cannot start under a small memory limit, with advice that
   names the wrong cause.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from harmonia import SandboxUnavailableError
from harmonia.tools.python import PythonToolConfig, isolation_mode
from harmonia.tools.python._output import CellOutput
from harmonia.tools.python._session import processes_of_uid

MIB = 1024 * 1024
root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="per-session uids and the tmpfs data drive need a root host"
)


def image_code(nbytes: int, count: int = 1) -> str:
    """Code that displays ``count`` PNG-typed payloads of ``nbytes`` bytes each."""
    return (
        "import base64\nfrom IPython.display import display\n"
        f"payload = base64.b64encode(b'\\x89PNG' + bytes({nbytes})).decode()\n"
        f"for _ in range({count}):\n"
        "    display({'image/png': payload}, raw=True)\n"
    )


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A host file the sandbox must never change, whatever link it plants to it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("sentinel")
    victim.chmod(0o644)
    return victim


def assert_untouched(victim: Path) -> None:
    info = victim.lstat()
    assert victim.read_text() == "sentinel"
    assert stat.S_ISREG(info.st_mode)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (
        os.geteuid(),
        os.getegid(),
        0o644,
    )


# -- 1. the host writes nothing through a link the sandbox planted ----------------


def test_symlinks_at_every_image_name_do_not_redirect_the_hosts_write(
    aio: Any, tools: Any, sandbox: None, victim: Path
) -> None:
    plant = (
        "import os\n"
        "for call in range(1, 4):\n"
        "    for n in range(1, 4):\n"
        "        for ext in ('png', 'jpg', 'gif', 'svg'):\n"
        f"            os.symlink({str(victim)!r}, f'/mnt/data/output_{{call}}_{{n}}.{{ext}}')\n"
    )
    tool = tools.make()
    out = aio.run(tool.run(plant + image_code(100)))
    assert_untouched(victim)
    [saved] = out.metadata["images"]
    info = Path(saved).lstat()
    assert stat.S_ISREG(info.st_mode) and info.st_size == 104
    assert info.st_uid == tool.session_uid
    links = [p for p in tool.data_dir.iterdir() if p.is_symlink()]
    assert len(links) == 36  # every planted link is still a link, never written through
    tools.close(tool)
    assert_untouched(victim)


def test_the_kernel_cannot_touch_its_connection_file_or_socket_directory(
    aio: Any, tools: Any, sandbox: None, victim: Path
) -> None:
    tool = tools.make()
    code = (
        "import os, sys\n"
        "conn = sys.argv[sys.argv.index('-f') + 1]\n"
        "ipc = os.path.join(os.path.dirname(conn), 'ipc')\n"
        "attempts = [\n"
        "    lambda: open(conn, 'w').write('{}'),\n"
        "    lambda: os.unlink(conn),\n"
        f"    lambda: os.symlink({str(victim)!r}, conn + '.new'),\n"
        f"    lambda: os.symlink({str(victim)!r}, os.path.join(ipc, 'kernel-9')),\n"
        "    lambda: os.unlink(os.path.join(ipc, sorted(os.listdir(ipc))[0])),\n"
        "    lambda: os.chmod(ipc, 0o777),\n"
        "]\n"
        "for attempt in attempts:\n"
        "    try:\n        attempt()\n        print('ESCAPED')\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
    )
    out = aio.run(tool.run(code))
    assert "ESCAPED" not in out.text, out.text
    assert out.text.count("refused") == 6
    # A restart makes a new connection file and socket directory; all still well.
    died = aio.run(tool.run("import os; os._exit(1)"))
    assert died.metadata["status"] == "died"
    assert aio.run(tool.run("print('back')")).text == "back\n"
    assert_untouched(victim)
    tools.close(tool)


# -- 2. images are bounded ---------------------------------------------------------


def test_an_image_over_the_limit_is_not_written_and_the_reply_says_why(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(max_image_bytes=1 * MIB)
    out = aio.run(tool.run(image_code(3 * MIB) + "print('after')"))
    assert out.text == (
        "[image not saved: 3.0 MiB is over the limit of 1.0 MiB per image]\nafter\n"
    )
    assert out.metadata["images"] == [] and out.metadata["images_refused"] == 1
    assert list(tool.data_dir.iterdir()) == []
    tools.close(tool)


def test_the_images_of_one_call_are_capped(aio: Any, tools: Any, sandbox: None) -> None:
    tool = tools.make(max_images_per_call=3)
    out = aio.run(tool.run(image_code(10, count=5)))
    assert len(out.metadata["images"]) == 3
    assert out.text.count("[image saved to /mnt/data/") == 3
    assert out.text.count("[image not saved: a call may save at most 3 images]") == 2
    assert len(list(tool.data_dir.iterdir())) == 3
    # The cap is per call.
    again = aio.run(tool.run(image_code(10, count=1)))
    assert len(again.metadata["images"]) == 1
    tools.close(tool)


def test_the_host_refuses_an_oversized_image_even_if_the_kernel_did_not_cut_it(
    tmp_path: Path,
) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = CellOutput(1000, fd, "/mnt/data", "output_1_", max_image_bytes=MIB, max_images=1)
        big = base64.b64encode(bytes(2 * MIB)).decode()
        out.add("display_data", {"data": {"image/png": big}})
        out.add("display_data", {"data": {"image/png": "iVBORw0KGgo="}})
        out.add("display_data", {"data": {"image/png": "iVBORw0KGgo="}})
    finally:
        os.close(fd)
    assert out.text().splitlines()[0] == (
        "[image not saved: 2.0 MiB is over the limit of 1.0 MiB per image]"
    )
    assert out.text().splitlines()[2] == "[image not saved: a call may save at most 1 images]"
    assert len(list(tmp_path.iterdir())) == 1


@root_only
def test_an_image_the_full_data_drive_cannot_hold_is_refused_with_the_reason(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(data_size_limit=2 * MIB, max_image_bytes=1 * MIB)
    fill = (
        "try:\n"
        "    with open('/mnt/data/fill', 'wb') as f:\n"
        "        while True:\n            f.write(bytes(65536))\n"
        "except OSError as e:\n    print('full', e.strerror)\n"
    )
    assert aio.run(tool.run(fill)).text == "full No space left on device\n"
    out = aio.run(tool.run(image_code(512 * 1024)))
    assert out.text.startswith("[image not saved: the data drive refused it (No space left")
    tools.close(tool)


# -- 3. each session is its own bounded world --------------------------------------


@root_only
def test_each_session_has_its_own_uid_and_the_mode_is_reported(
    aio: Any, tools: Any, sandbox: None
) -> None:
    first, second = tools.make(), tools.make()
    aio.run(first.start())
    aio.run(second.start())
    assert first.isolation == second.isolation == isolation_mode(first.config)
    assert first.isolation in ("cgroup", "uid")
    assert first.session_uid != second.session_uid
    low, high = first.config.session_uid_range
    assert low <= first.session_uid <= high
    tools.close(first)
    tools.close(second)
    assert processes_of_uid(first.session_uid) == []


@root_only
def test_the_data_drive_is_size_capped_and_filling_it_fails_fast(
    aio: Any, tools: Any, sandbox: None
) -> None:
    # No per-file limit: the drive's own size is what stops the writes.
    tool = tools.make(data_size_limit=8 * MIB, file_size_limit=None)
    code = (
        "import os\n"
        "fd = os.open('/mnt/data/huge', os.O_CREAT | os.O_WRONLY)\n"
        "try:\n    os.posix_fallocate(fd, 0, 20 * 1024**3)\n    print('ESCAPED')\n"
        "except OSError as e:\n    print('fallocate', e.strerror)\n"
        "os.close(fd)\nos.unlink('/mnt/data/huge')\n"
        "written = 0\n"
        "try:\n"
        "    with open('/mnt/data/fill', 'wb') as f:\n"
        "        while True:\n            f.write(bytes(1 << 20))\n            written += 1\n"
        "except OSError as e:\n    print('fill', e.strerror)\n"
        "print(os.path.getsize('/mnt/data/fill') <= 8 * 1024**2)\n"
    )
    out = aio.run(tool.run(code))
    assert out.text == (
        "fallocate No space left on device\nfill No space left on device\nTrue\n"
    ), out.text
    assert tool.data_size_limit == 8 * MIB
    assert aio.run(tool.run("print('alive')")).text == "alive\n"
    tools.close(tool)


@root_only
def test_a_fork_bomb_in_one_session_does_not_stop_another_from_starting(
    aio: Any, tools: Any, sandbox: None
) -> None:
    bomber, victim = tools.make(process_limit=64), tools.make(process_limit=64)
    aio.run(bomber.start())
    bomb = (
        "import subprocess, time\n"
        "subprocess.Popen(['bash', '-c', 'bomb() { bomb | bomb & }; bomb'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "time.sleep(1.0)\nprint('bombed')\n"
    )
    out = aio.run(bomber.run(bomb))
    # The call ended; what it left running was stopped and the model told so.
    assert out.text.startswith("bombed\n")
    assert out.metadata["processes_stopped"] > 0
    assert "processes do not outlive the call" in out.text
    assert aio.run(victim.run("print('victim fine')")).text == "victim fine\n"
    assert aio.run(bomber.run("print('bomber fine')")).text == "bomber fine\n"
    tools.close(bomber)
    tools.close(victim)


# -- 4. the model learns when its output was cut -----------------------------------


def test_a_300_mb_print_is_cut_where_it_is_made_and_the_reply_says_how_much(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(memory_limit=1024 * MIB, timeout=90.0)
    out = aio.run(tool.run("print('HEAD' + 'x' * 300_000_000 + 'TAIL')"), 120)
    budget = tool.config.max_output_chars
    omitted = 300_000_009 - budget
    assert out.metadata["status"] == "ok"
    assert "MemoryError" not in out.text and "Traceback" not in out.text
    assert out.text.startswith("HEADxxx") and out.text.endswith("xxxTAIL\n")
    assert f"[... {omitted} characters omitted ...]" in out.text
    assert out.metadata["truncated_chars"] == omitted
    tools.close(tool)


def test_many_small_writes_are_counted_exactly(aio: Any, tools: Any, sandbox: None) -> None:
    tool = tools.make(max_output_chars=1000)
    code = "import os, sys\nfor i in range(20_000):\n    print(i)\n    sys.stderr.write('e')\n"
    out = aio.run(tool.run(code), 120)
    total = sum(len(str(i)) + 2 for i in range(20_000))
    assert out.metadata["truncated_chars"] == total - 1000
    assert f"[... {total - 1000} characters omitted ...]" in out.text
    assert len(out.text) < 1100
    tools.close(tool)


def test_huge_tracebacks_and_displayed_text_are_cut_and_counted(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(max_output_chars=1000)
    out = aio.run(tool.run("raise ValueError('v' * 1_000_000)"))
    assert out.metadata["status"] == "error"
    assert len(out.text) < 1100 and "characters omitted" in out.text
    shown = aio.run(tool.run("'r' * 1_000_000"))
    # The repr's quotes count; the line end the reply adds may be cut too.
    assert 1_000_002 - 1000 <= shown.metadata["truncated_chars"] <= 1_000_003 - 1000
    tools.close(tool)


def test_a_message_over_the_hosts_limit_is_refused_and_the_model_told(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(max_image_bytes=MIB, max_message_bytes=4 * MIB)
    # Bypass the kernel's own guard: send an oversized message by hand.
    code = (
        "print('before', flush=True)\n"
        "k = get_ipython().kernel\n"
        "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x' * 10**7},"
        " parent=k.get_parent('shell'))\n"
        "print('after')\n"
    )
    out = aio.run(tool.run(code))
    assert out.metadata["status"] == "lost"
    assert out.is_error
    assert "larger than the 4194304 bytes the tool accepts" in out.text
    assert "the Python kernel was restarted" in out.text
    assert aio.run(tool.run("print('next')")).text == "next\n"
    tools.close(tool)


# -- 5. a small memory limit: the kernel starts, or the error names the cause -------


def test_a_kernel_starts_under_a_256_mib_memory_limit(aio: Any, tools: Any, sandbox: None) -> None:
    tool = tools.make(memory_limit=256 * MIB)
    assert aio.run(tool.run("print('small but alive')")).text == "small but alive\n"
    tools.close(tool)


def test_a_memory_limit_too_small_to_start_is_named_as_the_cause(
    aio: Any, tools: Any, sandbox: None
) -> None:
    tool = tools.make(memory_limit=128 * MIB, startup_timeout=30.0)
    with pytest.raises(SandboxUnavailableError) as caught:
        aio.run(tool.start())
    message = str(caught.value)
    assert "ran out of memory while starting" in message
    assert "memory_limit=128 MiB" in message
    assert "ipykernel installed" not in message
    tools.close(tool)


def test_config_checks_the_message_limit_against_images_and_text() -> None:
    from harmonia import InputError

    with pytest.raises(InputError, match="max_message_bytes"):
        PythonToolConfig(max_image_bytes=64 * MIB, max_message_bytes=64 * MIB)
    with pytest.raises(InputError, match="session_uid_range"):
        PythonToolConfig(session_uid_range=(5, 1))
