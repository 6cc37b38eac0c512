"""The host side of a session, without a kernel: safe file creation, leftovers, uids, cgroups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harmonia import ToolError
from harmonia.tools.python import PythonToolConfig
from harmonia.tools.python._sandbox import (
    LAUNCHER_PATH,
    Identity,
    SessionDirs,
    bwrap_argv,
)
from harmonia.tools.python._session import (
    SessionCgroup,
    cgroup_parent,
    create_file,
    descendants,
    kill_below,
    lease_uid,
    open_dir,
)


def test_create_file_never_writes_through_a_link_or_over_a_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("sentinel")
    drive = tmp_path / "drive"
    drive.mkdir()
    (drive / "link").symlink_to(victim)
    (drive / "hard").hardlink_to(victim)
    fd = open_dir(drive)
    try:
        for name in ("link", "hard"):
            with pytest.raises(FileExistsError):
                create_file(fd, name, b"attack", None)
        create_file(fd, "new", b"data", None)
    finally:
        os.close(fd)
    assert victim.read_text() == "sentinel"
    assert (drive / "new").read_bytes() == b"data"
    # The directory itself may not be a link either.
    (tmp_path / "drive-link").symlink_to(drive)
    with pytest.raises(OSError):
        open_dir(tmp_path / "drive-link")


def test_kill_below_kills_descendants_and_spares_the_top_and_the_kept(tmp_path: Path) -> None:
    # (In the sandbox orphans are adopted by bubblewrap's init, below the top;
    # here they would go to the host's init, so no process here is orphaned.)
    top = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & sleep 300 & wait"])
    try:
        for _ in range(100):
            if len(descendants(top.pid)) >= 3:
                break
            time.sleep(0.05)
        below = descendants(top.pid)
        keep = frozenset(below[:1])
        killed = kill_below(top.pid, keep)
        assert killed == len(below) - 1
        assert psutil.pid_exists(top.pid)
        remaining = descendants(top.pid, live_only=True)
        assert remaining == below[:1]
    finally:
        for pid in descendants(top.pid):
            psutil.Process(pid).kill()
        top.kill()
        top.wait()


def test_uid_leases_are_exclusive_until_released() -> None:
    first = 1_790_065_600 + os.getpid() % 1000
    lease = lease_uid(first, first)
    try:
        assert lease.uid == first
        with pytest.raises(ToolError, match="in use"):
            lease_uid(first, first)
    finally:
        lease.release()
    again = lease_uid(first, first)
    again.release()


def _fake_cgroup(tmp_path: Path, controllers: str) -> Path:
    parent = tmp_path / "cg"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text(controllers)
    (parent / "cgroup.subtree_control").write_text("")
    return parent


def test_a_cgroup_parent_needs_memory_and_pids_and_gets_them_enabled(tmp_path: Path) -> None:
    parent = _fake_cgroup(tmp_path, "cpu memory pids\n")
    config = PythonToolConfig(cgroup_parent=str(parent))
    assert cgroup_parent(config) == parent
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert cgroup_parent(PythonToolConfig(cgroup_parent=str(parent), isolation="uid")) is None
    (tmp_path / "x").mkdir()
    lacking = _fake_cgroup(tmp_path / "x", "cpu memory\n")
    assert cgroup_parent(PythonToolConfig(cgroup_parent=str(lacking))) is None


def test_a_session_cgroup_gets_its_limits(tmp_path: Path) -> None:
    parent = _fake_cgroup(tmp_path, "memory pids\n")
    config = PythonToolConfig(session_memory_limit=3 << 30, process_limit=40)
    group = SessionCgroup(parent, config)
    assert group.path.parent == parent
    assert (group.path / "memory.max").read_text() == str(3 << 30)
    assert (group.path / "memory.swap.max").read_text() == "0"
    assert (group.path / "pids.max").read_text() == "40"
    assert group.procs_file == str(group.path / "cgroup.procs")


def test_in_cgroup_mode_the_sandbox_is_started_from_inside_the_cgroup(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    dirs = SessionDirs(tmp_path / "data", tmp_path / "kernel", None)
    argv = bwrap_argv(
        PythonToolConfig(), dirs, sys.executable, ["-f", "x"], Identity(5, 5, str(procs))
    )
    assert argv[:4] == [
        sys.executable,
        "-I",
        str(LAUNCHER_PATH),
        json.dumps({"enter_cgroup": str(procs)}),
    ]
    assert argv[4:6] == ["--", "bwrap"]
    # The launcher's host role: write its own pid, then become the command.
    done = subprocess.run(
        [sys.executable, "-I", str(LAUNCHER_PATH), argv[3], "--", "/bin/sh", "-c", "echo $$"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert procs.read_text() == done.stdout.strip()
