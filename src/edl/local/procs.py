"""Spawning and stopping pod processes so that none outlives the run.

Every pod process leads its own process group (so a terminal Ctrl-C reaches
only ``edl run``, which then stops pods in order, and stopping a pod reaches
its children too) and carries PR_SET_PDEATHSIG=SIGKILL (so even if ``edl run``
is SIGKILLed, the kernel kills the pod's leader).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from edl.procs import die_with_parent


def spawn(
    argv: list[str], env: Mapping[str, str], cwd: str | Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start one process in a new process group, stdout+stderr appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=die_with_parent,
            close_fds=True,
        )


def signal_group(pgid: int, sig: int) -> bool:
    """Send sig to a process group; False if the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies count until reaped)."""
    return any(True for _ in pids_in_group(pgid))


def pids_in_group(pgid: int) -> Iterator[int]:
    """Pids whose process group is pgid, from /proc (no psutil)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is not None and stat[1] == pgid and stat[0] != "Z":
            yield int(entry.name)


def pids_with_env(name: str, value: str, *also: tuple[str, str]) -> list[int]:
    """Live (non-zombie) pids of ours whose environment has name=value (and every pair
    in ``also``): finds leftovers."""
    needles = [f"{k}={v}".encode() for k, v in ((name, value), *also)]
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        variables = environ.split(b"\0")
        if all(needle in variables for needle in needles):
            stat = _read_stat(pid)
            if stat is not None and stat[0] != "Z":
                found.append(pid)
    return found


def script_pids(name: str, value: str, script: str, *, not_module: str = "") -> list[int]:
    """`pids_with_env` narrowed to processes running ``script`` (an argument ending with it),
    leaving out those whose command line names ``not_module`` (e.g. the launcher that
    passes the script on): finds a job's worker processes."""
    found = []
    for pid in pids_with_env(name, value):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        runs_script = any(arg.endswith(script.encode()) for arg in argv)
        if runs_script and not (not_module and not_module.encode() in argv):
            found.append(pid)
    return found


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state, pgid) of a pid, or None if it vanished."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = text[text.rfind(")") + 2 :].split()
    with contextlib.suppress(IndexError, ValueError):
        return rest[0], int(rest[2])
    return None
