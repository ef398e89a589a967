"""Defect 4: temporary etcd data dirs name their owner; dead owners' dirs are swept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from edl.coord.datadirs import OWNER_FILE, make_owned_dir, process_start_ticks, sweep_dead


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_dead_owners_dirs_go_live_and_unowned_ones_stay(tmp_path: Path) -> None:
    mine = make_owned_dir(tmp_path)
    dead = tmp_path / "edl-etcd-dead"
    (dead / "data").mkdir(parents=True)
    (dead / OWNER_FILE).write_text(json.dumps({"pid": _dead_pid(), "start": 1}))
    reused = tmp_path / "edl-etcd-reused"  # our pid, another start time: a reused pid
    reused.mkdir()
    start = process_start_ticks(os.getpid())
    assert start is not None
    (reused / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": start + 1}))
    unowned = tmp_path / "edl-etcd-old"
    unowned.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    assert sorted(sweep_dead(tmp_path)) == sorted([dead, reused])
    assert mine.exists() and unowned.exists() and other.exists()
    assert not dead.exists() and not reused.exists()


def test_a_new_dir_sweeps_first(tmp_path: Path) -> None:
    dead = tmp_path / "edl-etcd-x"
    dead.mkdir()
    (dead / OWNER_FILE).write_text(json.dumps({"pid": _dead_pid(), "start": None}))
    fresh = make_owned_dir(tmp_path)
    assert not dead.exists() and fresh.exists()
    owner = json.loads((fresh / OWNER_FILE).read_text())
    assert owner["pid"] == os.getpid()
