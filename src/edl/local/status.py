"""The status channel of a local run: ``runs/<job>-<timestamp>/status.json``.

``edl run`` rewrites the file about once a second (atomically: temp file +
rename), so ``edl status`` in another terminal reads a consistent snapshot
without talking to the run. A snapshot whose writer process is gone while it
still says Running is reported as stale. The writer is named by pid *and* its
start time, because pids are reused (pid_max is often only 32768).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from edl.coord.datadirs import process_alive, process_start_ticks

STATUS_FILE = "status.json"
ACTIVE_STATES = frozenset({"Starting", "Running", "Stopping"})


@dataclass
class PodLine:
    """One pod as the live display and `edl status` list it."""

    name: str
    role: str
    phase: str
    pid: int | None = None
    exit_code: int | None = None
    message: str = ""


@dataclass
class RunSnapshot:
    """Everything the display and `edl status` show about one local run."""

    job: str
    namespace: str = "default"
    state: str = "Starting"  # Starting | Running | Stopping | Succeeded | Failed | Stopped
    message: str = ""
    run_dir: str = ""
    pid: int = field(default_factory=os.getpid)
    # the writer's start time (clock ticks since boot, /proc/<pid>/stat field 22);
    # None in files written before it was recorded
    pid_start: int | None = field(default_factory=lambda: process_start_ticks(os.getpid()))
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    etcd_endpoints: str = ""
    pass_index: int | None = None  # 0-based pass being trained
    passes: int | None = None
    tasks_done: int | None = None  # in the current pass
    tasks_total: int | None = None
    tasks_failed: int | None = None
    redispatched: int | None = None
    trainers_running: int = 0
    trainers_desired: int = 0
    trainers_min: int = 0
    trainers_max: int = 0
    loss: float | None = None
    samples_per_s: float | None = None
    accuracy: float | None = None
    # the job's measured throughput (trainers producing it, samples/s) and the fitted
    # curve's prediction at that count -1, +0, +1 (see edl.throughput)
    measured_trainers: int | None = None
    measured_samples_per_s: float | None = None
    fitted_samples_per_s: list[float] | None = None
    fitted_curve: str | None = None
    # the Autoscaler's smoothed resize pause of the job and how many resizes it folds in
    resize_pause_s: float | None = None
    resizes_measured: int = 0
    pods: list[PodLine] = field(default_factory=list)
    # [seconds since start, trainer parallelism] at every change the Autoscaler made
    desired_history: list[list[float]] = field(default_factory=list)
    # collective jobs (spec.mode: collective): torch's elastic agent, no task master
    mode: str = "parameter-server"
    world_size: int | None = None  # workers of the last completed rendezvous
    restarts: int = 0  # rendezvous rounds after the first: every worker restarted
    epoch: int | None = None  # from the script's `epoch=N ...` metric lines: epochs finished
    epochs: int | None = None  # the script's `epochs=M`: the total, for progress and the ETA
    # a script adapting its batch (`edl.runtime.collective.adaptive`): its total batch,
    # measured gradient noise scale (samples) and that batch's statistical efficiency
    batch: float | None = None
    noise_scale: float | None = None
    efficiency: float | None = None
    noise_unresolved: bool = False  # measured, but |G|² not yet above the noise: φ unknown
    # a PS job adapting its batch: tasks its trainers finished at each per-trainer batch
    # the master handed out ({"32": 40, "171": 300}: the batch changed without a restart)
    trainer_batches: dict[str, int] = field(default_factory=dict)
    # [seconds since start, world size, round] at every new rendezvous round
    world_history: list[list[float]] = field(default_factory=list)
    # faults and decisions, one line each: [seconds since start, text]; the last few only,
    # events_total counts them all (a reader prints those it has not printed yet)
    events: list[list[Any]] = field(default_factory=list)
    events_total: int = 0
    training_started_at: float | None = None  # wall time of the first task done (for the ETA)
    # units (tasks, epochs) already done when training_started_at was taken: the ETA's
    # rate counts only what was done after it (a first epoch's time includes the start)
    training_started_done: int = 0
    # the last checkpoints (pservers or rank 0): "last state saved (...)", "... NOT saved"
    checkpoint: str = ""

    @property
    def elapsed_s(self) -> float:
        return max(0.0, self.updated_at - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSnapshot:
        """Tolerant reader: unknown keys ignored, so old `edl status` reads newer files."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known and k != "pods"}
        values.setdefault("pid_start", None)  # an older file: not *our* start time
        pods = [
            PodLine(**{k: v for k, v in p.items() if k in PodLine.__dataclass_fields__})
            for p in data.get("pods") or []
        ]
        return cls(**values, pods=pods)


def write_snapshot(run_dir: Path, snapshot: RunSnapshot) -> None:
    """Atomically replace run_dir/status.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{STATUS_FILE}.tmp"
    tmp.write_text(json.dumps(snapshot.to_dict(), indent=1))
    os.replace(tmp, run_dir / STATUS_FILE)


def read_snapshot(run_dir: Path) -> RunSnapshot:
    """The last snapshot of a run; ValueError with the path if it is unreadable."""
    path = run_dir / STATUS_FILE
    try:
        return RunSnapshot.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        # AttributeError/TypeError: valid JSON of the wrong shape (a list, a bad pod entry)
        raise ValueError(f"{path}: cannot read run status ({error})") from error


def new_run_dir(runs_root: Path, job: str, now: float | None = None) -> Path:
    """runs/<job>-<UTC timestamp>, made unique if two runs start in the same second.

    mkdir itself decides (not an exists() check first), so two `edl run`s of one job
    started together in two terminals cannot pick the same directory.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    runs_root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = runs_root / (f"{job}-{stamp}" if n == 1 else f"{job}-{stamp}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        return candidate


def find_runs(runs_root: Path, job: str | None = None) -> list[Path]:
    """Run directories with a status file, newest (latest started) first; only JOB's if
    given.

    JOB may also be a run's directory name (``digits-20261130-161449``) or path. Newest by
    the start in the directory's name (``-2`` for a second run in the same second), not by
    the status file's last write: two runs at once both write theirs every second.
    """
    if job is not None and (Path(job) / STATUS_FILE).is_file():
        return [Path(job)]
    if job is not None and (runs_root / job / STATUS_FILE).is_file():
        return [runs_root / job]
    if not runs_root.is_dir():
        return []
    found = []
    for path in runs_root.iterdir():
        status = path / STATUS_FILE
        if not status.is_file():
            continue
        if job is not None and not _belongs_to(path.name, job):
            continue
        found.append((_started(path.name, status), path))
    return [p for _, p in sorted(found, reverse=True)]


_STAMP = re.compile(r"-(\d{8})-(\d{6})(?:-(\d+))?$")


def _started(dir_name: str, status: Path) -> tuple[str, int, float]:
    """A sort key for when a run started: its name's stamp and suffix, else the file's time."""
    found = _STAMP.search(dir_name)
    if found is None:
        mtime = status.stat().st_mtime
        return time.strftime("%Y%m%d%H%M%S", time.gmtime(mtime)), 0, mtime
    day, clock, n = found.groups()
    return day + clock, int(n or 1), 0.0


def others_active(runs: list[Path]) -> list[Path]:
    """The runs after the first (the newest) whose writer still runs: several runs of one
    name at once, which `edl status` and `edl logs` say rather than pick silently."""
    active = []
    for run_dir in runs[1:]:
        try:
            if effective_state(read_snapshot(run_dir)) in ACTIVE_STATES:
                active.append(run_dir)
        except ValueError:
            continue
    return active


def _belongs_to(dir_name: str, job: str) -> bool:
    """runs/<job>-YYYYMMDD-HHMMSS[-n]: the job name is everything before the timestamp."""
    if not dir_name.startswith(job + "-"):
        return False
    rest = dir_name[len(job) + 1 :].split("-")
    return len(rest) >= 2 and rest[0].isdigit() and len(rest[0]) == 8


def writer_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Whether the process that writes a snapshot still exists.

    With start_ticks, a process now holding the same pid but started at another
    time is a reuse of the pid, not the writer. Without (older status files), the
    pid alone decides.
    """
    return process_alive(pid, start_ticks)


def effective_state(snapshot: RunSnapshot) -> str:
    """The snapshot's state, or Stale if it claims to be active but its writer is gone."""
    if snapshot.state in ACTIVE_STATES and not writer_alive(snapshot.pid, snapshot.pid_start):
        return "Stale"
    return snapshot.state
