"""The sandbox's last two gaps (issue 35): the host's names, a session's total memory.

Code in the sandbox sees its own ``/etc/hosts`` and hostname, nothing naming the
host; and in uid mode (no cgroup to bound a session) a watchdog sums the
resident memory of the session's processes and stops them all past
``session_memory_limit``, telling the model.
"""

from __future__ import annotations

import ast
import socket
from typing import Any

import pytest

from harmonia.tools.python._session import processes_of_uid

MIB = 1024 * 1024


def test_the_sandbox_has_its_own_hosts_file_and_hostname(run: Any) -> None:
    out = run(
        "import socket\n"
        "print(repr(open('/etc/hosts').read()))\n"
        "print(open('/etc/hostname').read().strip(), socket.gethostname())\n"
    )
    lines = out.text.splitlines()
    assert lines[-1] == "sandbox sandbox", out.text
    hosts = ast.literal_eval(lines[0])  # the repr printed above
    names = {word for line in hosts.splitlines() for word in line.split()[1:]}
    assert names == {"localhost", "sandbox", "ip6-localhost", "ip6-loopback"}, hosts
    host = socket.gethostname()
    assert host in ("localhost", "sandbox") or host not in hosts


#: Three children that each stay under RLIMIT_AS but together pass the session's limit;
#: each holds its memory (touched, so resident) until it is killed, and the cell
#: waits for them: only the watchdog ends this call before its timeout.
HOG = """
import subprocess, sys
child = (
    "import sys, time\\n"
    "block = bytearray(300 * 1024 * 1024)\\n"
    "for i in range(0, len(block), 4096):\\n"
    "    block[i] = 1\\n"
    "print('holding', flush=True)\\n"
    "time.sleep(600)\\n"
)
procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(3)]
for p in procs:
    p.wait()
print('the children ended on their own')
"""


def test_in_uid_mode_a_session_past_its_memory_is_stopped_and_the_model_told(
    sandbox: None, tools: Any, aio: Any
) -> None:
    tool = tools.make(
        isolation="uid",
        timeout=120.0,
        memory_limit=512 * MIB,  # each child fits
        session_memory_limit=700 * MIB,  # all three do not
        memory_watch_interval=0.05,
    )
    aio.run(tool.start())
    if tool.isolation != "uid":
        pytest.skip(f"the session runs in {tool.isolation} mode here, not uid (needs root)")
    uid = tool.session_uid
    assert uid is not None
    out = aio.run(tool.run(HOG), 180)
    assert "the children ended on their own" not in out.text
    assert "processes together held" in out.text, out.text
    assert "more than its limit of 700 MiB, so all of them were stopped" in out.text
    assert out.is_error and out.metadata["status"] == "memory"
    assert out.metadata["memory_bytes"] > 700 * MIB
    assert processes_of_uid(uid) == []  # every process of the session is gone
    # the session goes on, in a fresh kernel
    again = aio.run(tool.run("print(6 * 7)"), 60)
    assert again.text.strip().endswith("42"), again.text
