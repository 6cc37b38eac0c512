"""The first program that runs inside the sandbox: limits, identity, then the kernel.

Run as a script (``python _launcher.py SETTINGS_JSON -- COMMAND...``), never
imported by harmonia: bubblewrap binds this one file into the sandbox, so it
may use the standard library only. It

1. sets the resource limits (soft = hard, so the code cannot raise them back;
   RLIMIT_CPU gets one second of grace between SIGXCPU and SIGKILL),
2. when it runs as root -- which happens when the host process is root, since
   a root host starts bubblewrap without a user namespace so that it can bind
   directories only root can traverse (``/root/.pyenv``) -- drops to the
   unprivileged uid/gid in the settings. That matters beyond hygiene: Linux
   does not enforce RLIMIT_NPROC for the host's uid 0, so a fork bomb is only
   stopped under a real unprivileged uid,
3. replaces itself with the kernel command.

The settings are a JSON object: ``{"rlimits": {"AS": bytes, ...}, "uid": int |
null, "gid": int | null, "check": bool}``. With ``check`` it prints its uid
and exits instead of starting a command, which is what the sandbox probe runs.

On the host it has one more job, ``{"enter_cgroup": ".../cgroup.procs"}``: move
itself into the session's cgroup, then become bubblewrap, so that every
process of the sandbox starts inside that cgroup.
"""

from __future__ import annotations

import json
import os
import resource
import sys


def _set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = getattr(resource, "RLIMIT_" + name)
        hard = value + 1 if name == "CPU" else value
        resource.setrlimit(which, (value, hard))


def _drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # With every uid non-zero the kernel has cleared the capability sets; make
    # sure, because the rest of the sandbox relies on it.
    if os.getresuid() != (uid, uid, uid) or os.geteuid() == 0:
        raise SystemExit("harmonia sandbox launcher: could not drop root privileges")


def main(argv: list[str]) -> None:
    settings = json.loads(argv[1])
    command = argv[3:] if len(argv) > 2 and argv[2] == "--" else []
    if settings.get("enter_cgroup"):
        with open(settings["enter_cgroup"], "w") as procs:
            procs.write(str(os.getpid()))
    _set_limits(settings.get("rlimits", {}))
    uid, gid = settings.get("uid"), settings.get("gid")
    if os.getuid() == 0 and uid is not None and gid is not None:
        _drop_privileges(uid, gid)
    if settings.get("check"):
        # The probe imports what the kernel needs, as the sandboxed user, so
        # an unreadable interpreter prefix or a missing ipykernel shows here.
        import ipykernel  # noqa: F401

        print(os.getuid())
        return
    if not command:
        raise SystemExit("harmonia sandbox launcher: no command after '--'")
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
