"""Temporary etcd data dirs that name their owner, and a sweep of dead owners' dirs.

Why: an embedded etcd preallocates a 64 MB WAL (128 MB once it rolls), in a
``/tmp/edl-etcd-*`` dir that its owner removes on a clean stop. An owner killed
by SIGKILL (``edl run``, ``edl etcd``, a test) cannot; its etcd dies with it
(``PR_SET_PDEATHSIG``), but the dir would stay for ever. So each dir holds an
``owner`` file (pid and the pid's start time, since pids are reused), and every
new temporary dir first removes the dirs whose owner is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "edl-etcd-"
OWNER_FILE = "owner"


def process_start_ticks(pid: int) -> int | None:
    """When pid started (clock ticks since boot, /proc/<pid>/stat field 22); None if gone.

    pid plus start time names one process for good; a pid alone may be reused.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and ')': fields 3.. follow the last ')'
    rest = text[text.rfind(")") + 2 :].split()
    try:
        return int(rest[19])  # field 22 is the 20th after comm
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Whether the process (pid, started at start_ticks when given) still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start_ticks is None:
        return True
    now = process_start_ticks(pid)
    return now is None or now == start_ticks  # None: /proc unreadable, trust the pid


def make_owned_dir(root: str | Path | None = None) -> Path:
    """A new ``edl-etcd-*`` dir owned by this process; dead owners' dirs are swept first."""
    sweep_dead(root)
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    pid = os.getpid()
    owner = {"pid": pid, "start": process_start_ticks(pid)}
    (path / OWNER_FILE).write_text(json.dumps(owner))
    return path


def sweep_dead(root: str | Path | None = None) -> list[Path]:
    """Remove every ``edl-etcd-*`` dir under root (default: the temp dir) whose owner is gone.

    Dirs without an owner file (made before owners were recorded, or in the instant
    between mkdtemp and the write) are left alone. Returns the removed dirs.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    removed = []
    with contextlib.suppress(OSError):
        for path in base.glob(f"{PREFIX}*"):
            owner = _owner(path)
            if owner is not None and not process_alive(*owner):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _owner(path: Path) -> tuple[int, int | None] | None:
    try:
        data = json.loads((path / OWNER_FILE).read_text())
        return int(data["pid"]), (int(data["start"]) if data.get("start") is not None else None)
    except (OSError, ValueError, KeyError, TypeError):
        return None
