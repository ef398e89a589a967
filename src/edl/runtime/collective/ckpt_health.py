"""Checkpoint health of a collective job's rank 0, watched by the agent that hosts it.

edl does not write a collective job's checkpoint: the script saves its own into
``EDL_CHECKPOINT_DIR`` (rank 0 does, in the examples, after every epoch), and neither
the restart path nor `edl.elastic` saves anything. A directory that stops taking
writes (removed, replaced, read-only, full) fails the script's *next* save, and a
restart before a good one loses everything since the last. So the agent whose pod
hosts rank 0 probes the directory every ``PROBE_S``: a small file created, written,
fsynced and removed, and the filesystem's free space against the size of the newest
file there (the last checkpoint: the next one will not be smaller), so a full disk
is seen before the save that would not fit.

Each change of health goes to ``state/checkpoint-health/rank0`` in the job's etcd, in
the pservers' record format (`edl.local.checkpoints`): `edl run` prints a fault line
and its clearing, the controller sets ``CheckpointFailing``, and the record written
after the workers end is the run's last word on the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from edl.runtime.collective import gateway, keys

PROBE_S = 2.0
PROBE_PREFIX = ".edl-probe-"
PROBE_BYTES = b"edl checkpoint probe\n" * 200  # 4.2 kB: one block written and synced
NEWEST_SCAN_LIMIT = 2000  # files looked at for the newest checkpoint

Statvfs = Callable[[str], Any]


@dataclass(frozen=True)
class Newest:
    name: str  # relative to the directory
    size: int
    mtime: float


@dataclass(frozen=True)
class Probe:
    cause: str  # "" when the directory takes a checkpoint now; stable while it fails alike
    error: str
    newest: Newest | None
    free: int | None  # bytes the directory's filesystem has free for this user


def newest_file(directory: str) -> Newest | None:
    """The most recently written file under ``directory`` (probe files aside)."""
    best: Newest | None = None
    seen = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            seen += 1
            if seen > NEWEST_SCAN_LIMIT:
                return best
            if name.startswith(PROBE_PREFIX):
                continue
            path = os.path.join(root, name)
            try:
                stat = os.stat(path)
            except OSError:  # removed meanwhile (a script's temporary file)
                continue
            if best is None or stat.st_mtime > best.mtime:
                best = Newest(os.path.relpath(path, directory), stat.st_size, stat.st_mtime)
    return best


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def probe(directory: str, pod: str, statvfs: Statvfs = os.statvfs) -> Probe:
    """Whether ``directory`` takes a checkpoint now: write and sync a small file, then
    compare the free space with the last checkpoint's size."""
    newest = newest_file(directory)
    path = os.path.join(directory, PROBE_PREFIX + (pod or str(os.getpid())))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(path)
        stat = statvfs(directory)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return Probe(f"errno {error.errno}", f"{directory}: [Errno {error.errno}] "
                     f"{error.strerror or error}", newest, None)
    if not int(getattr(stat, "f_blocks", 1)):  # a filesystem that reports no sizes (some
        return Probe("", "", newest, None)  # FUSE mounts): the write above is the test
    free = int(stat.f_bavail) * int(stat.f_frsize)
    if newest is not None and free < newest.size:
        return Probe("space", f"{directory}: {_mib(free)} free, less than its last checkpoint "
                     f"({newest.name}, {_mib(newest.size)}): the next save will not fit",
                     newest, free)
    return Probe("", "", newest, free)


def hosts_rank0(records: Mapping[str, str], own_key: str) -> bool:
    """Whether the newest rendezvous that placed rank 0 placed it in this pod (the
    agents' records, ``collective/agents/<pod>``, as `handler` and `live` write them)."""
    best: tuple[float, float, str] | None = None
    for key, raw in records.items():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("rank") != 0:
            continue
        round_, at = record.get("round"), record.get("time")
        order = (float(round_) if isinstance(round_, (int, float)) else -1.0,
                 float(at) if isinstance(at, (int, float)) else 0.0, key)
        if best is None or order > best:
            best = order
    return best is not None and best[2] == own_key


class RankZeroWatch:
    """Probes the checkpoint directory while this pod hosts rank 0; publishes changes."""

    def __init__(self, env: Mapping[str, str], namespace: str, job: str, directory: str,
                 probe_s: float = PROBE_S, statvfs: Statvfs = os.statvfs) -> None:
        self.endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
        self.pod = env.get("EDL_POD_NAME") or f"agent-{os.getpid()}"
        self.directory = directory
        self.agents = keys.agents_prefix(namespace, job)
        self.own = keys.agent_key(namespace, job, self.pod)
        self.key = keys.checkpoint_health_key(namespace, job)
        self.probe_s = probe_s
        self.statvfs = statvfs
        self.published = ""  # the cause last published ("" when fine)
        self.rank0 = False  # this pod hosted rank 0 at the last check
        self.failing_since: float | None = None
        self.newest: Newest | None = None  # the last checkpoint file seen (a directory
        # replaced or unmounted hides it, but the training since it is what is at risk)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self, final: bool = False) -> dict[str, Any] | None:
        """One probe when this pod hosts rank 0; the record when it was published."""
        rank0 = hosts_rank0(gateway.get_prefix(self.endpoints, self.agents), self.own)
        became, self.rank0 = rank0 and not self.rank0, rank0
        if not rank0:
            return None
        found = probe(self.directory, self.pod, self.statvfs)
        self.newest = found.newest or self.newest
        if found.cause and self.failing_since is None:
            self.failing_since = time.time()
        elif not found.cause:
            self.failing_since = None
        if not (became or final or found.cause != self.published):
            return None
        record = self.record(found, final)
        gateway.put(self.endpoints, self.key, json.dumps(record))
        self.published = found.cause
        return record

    def record(self, found: Probe, final: bool) -> dict[str, Any]:
        newest = found.newest or self.newest
        return {"who": "rank 0", "pod": self.pod, "ok": not found.cause, "error": found.error,
                "failing_since": self.failing_since,
                "saved_file": newest.name if newest else None,
                "saved_at": newest.mtime if newest else None,
                "saved_size": newest.size if newest else None,
                "free_bytes": found.free, "final": final, "at": time.time()}

    def _loop(self) -> None:
        while not self._stop.wait(self.probe_s):
            try:
                self.check()
            except Exception as error:  # etcd away, an odd record: the next probe retries
                print(f"edl agent: checkpoint health not checked: {error}", file=sys.stderr,
                      flush=True)

    @property
    def enabled(self) -> bool:
        return bool(self.endpoints and self.directory)

    def start(self) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._loop, name="rank-0 checkpoint probe",
                                        daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """Stop probing; the workers ended: publish the last word if this pod hosts rank 0."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.probe_s + 5)
        if not self.enabled:
            return
        try:
            self.check(final=True)
        except Exception as error:
            print(f"edl agent: final checkpoint health not published: {error}",
                  file=sys.stderr, flush=True)


def watch(env: Mapping[str, str], namespace: str, job: str, workspace: str) -> RankZeroWatch:
    """The started watch of this pod's ``EDL_CHECKPOINT_DIR`` (relative to ``workspace``)."""
    given = env.get("EDL_CHECKPOINT_DIR") or ""
    rank0 = RankZeroWatch(env, namespace, job, os.path.join(workspace, given) if given else "")
    rank0.start()
    return rank0
