"""The process pod runner: pods of the in-process cluster as real processes.

This is the kubelet of a local run (`edl.cluster.port.PodRunner`). The
in-process control plane decides which pods exist and binds them; this pod runner
starts each pod's containers as processes (what to run comes from ``podspec``),
reports ``on_running`` once they run and ``on_exit(code)`` once all have
stopped, and on deletion sends SIGTERM, then SIGKILL after the grace period.

Why a pod failed is kept as Kubernetes' FallbackToLogsOnError would: the tail
of the failing container's log (`termination_message`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edl.api.names import LABEL_ROLE
from edl.local import procs
from edl.local.podspec import LocalContext, ports_needed, process_specs, runnable_containers
from edl.local.ports import PortAllocator

# Every pod process carries this variable (value: the run directory), so a
# leftover process of a run can be found by scanning /proc.
RUN_MARKER_ENV = "EDL_LOCAL_RUN"
POD_NAME_ENV = "EDL_POD_NAME"  # every process of a pod inherits it (podspec sets it)
MESSAGE_LINES = 20
MESSAGE_CHARS = 2000
POLL_SECONDS = 0.1
START_ERROR_CODE = 128  # exit code reported when a container could not be exec'd


@dataclass
class _Container:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    port: int
    port_count: int


@dataclass
class _Pod:
    """Book-keeping of one pod from start until its exit was reported."""

    name: str
    role: str
    containers: list[_Container] = field(default_factory=list)
    exit_code: int | None = None
    message: str = ""
    stop_deadline: float | None = None
    terminated_signal_sent: bool = False
    task: asyncio.Task[None] | None = None
    started_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class PodRecord:
    """A pod as the run shows it: role, pids, exit code, termination message."""

    name: str
    role: str
    pids: list[int]
    exit_code: int | None
    message: str
    log_path: str
    started_at: float


class ProcessPodRunner:
    """Runs pods as process groups on this machine; logs go to ``run_dir/<pod>.log``."""

    def __init__(
        self,
        run_dir: Path,
        context: LocalContext,
        cwd: Path | None = None,
        ports: PortAllocator | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.context = context
        self.cwd = cwd or Path.cwd()
        self.ports = ports or PortAllocator()
        self._pods: dict[str, _Pod] = {}
        self._closed = False

    # -- PodRunner ------------------------------------------------------

    def start(
        self,
        pod: Mapping[str, Any],
        on_running: Callable[[], None],
        on_exit: Callable[[int], None],
    ) -> None:
        """Spawn the pod's containers and watch them; a spawn error fails the pod, not the run."""
        meta = pod.get("metadata") or {}
        name = str(meta["name"])
        role = str((meta.get("labels") or {}).get(LABEL_ROLE, ""))
        entry = _Pod(name=name, role=role)
        self._pods[name] = entry
        if self._closed:  # a controller replacing pods while the run shuts down
            entry.stop_deadline = time.monotonic()
        entry.task = asyncio.get_running_loop().create_task(
            self._supervise(entry, dict(pod), on_running, on_exit), name=f"pod {name}"
        )

    def stop(self, pod: Mapping[str, Any], grace_period_s: float) -> None:
        """SIGTERM now; the supervisor SIGKILLs the groups once the grace period has passed."""
        entry = self._pods.get(str(pod["metadata"]["name"]))
        if entry is None or entry.exit_code is not None:
            return
        deadline = time.monotonic() + max(0.0, grace_period_s)
        if entry.stop_deadline is None or deadline < entry.stop_deadline:
            entry.stop_deadline = deadline
        for c in entry.containers:
            procs.signal_group(c.process.pid, signal.SIGTERM)
        entry.terminated_signal_sent = True

    # -- run-level operations -------------------------------------------

    async def shutdown(self, grace_period_s: float = 5.0) -> None:
        """Stop every pod and wait until all exited (Ctrl-C, end of run).

        From here on, pods started by the control plane fail at once without spawning.
        """
        self._closed = True
        for entry in list(self._pods.values()):
            if entry.exit_code is None:
                self.stop({"metadata": {"name": entry.name}}, grace_period_s)
        tasks = [e.task for e in self._pods.values() if e.task is not None and not e.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_period_s + 10)
        for entry in self._pods.values():  # belt and braces: nothing may survive the run
            self._kill_groups(entry, reap_timeout=2.0)

    def kill_all(self) -> None:
        """SIGKILL every pod now (a second Ctrl-C): no grace, nothing left behind."""
        self._closed = True
        for entry in self._pods.values():
            entry.stop_deadline = time.monotonic()
            self._kill_groups(entry)

    def records(self) -> list[PodRecord]:
        """Every pod this pod runner started, oldest first."""
        return [
            PodRecord(
                name=e.name,
                role=e.role,
                pids=[c.process.pid for c in e.containers if c.process.poll() is None],
                exit_code=e.exit_code,
                message=e.message,
                log_path=str(e.containers[0].log_path) if e.containers else "",
                started_at=e.started_at,
            )
            for e in self._pods.values()
        ]

    def termination_message(self, pod_name: str) -> str:
        """Why the pod failed (tail of its log), or "" while it runs or if it succeeded."""
        entry = self._pods.get(pod_name)
        return entry.message if entry else ""

    def live_pids(self) -> list[int]:
        return [pid for r in self.records() for pid in r.pids]

    # -- internals -------------------------------------------------------

    async def _supervise(
        self,
        entry: _Pod,
        pod: dict[str, Any],
        on_running: Callable[[], None],
        on_exit: Callable[[int], None],
    ) -> None:
        try:
            code = await self._run(entry, pod, on_running)
        except asyncio.CancelledError:
            self._kill_groups(entry, reap_timeout=2.0)
            raise
        except Exception as error:  # a pod runner bug must not leave the pod hanging
            entry.message = entry.message or f"{type(error).__name__}: {error}"
            code = START_ERROR_CODE
        self._kill_groups(entry)
        self._release_ports(entry)
        entry.exit_code = code
        on_exit(code)

    async def _run(
        self, entry: _Pod, pod: dict[str, Any], on_running: Callable[[], None]
    ) -> int:
        if entry.stop_deadline is not None:  # deleted before it ever ran
            return 128 + signal.SIGTERM
        failure = self._spawn(entry, pod)
        if failure:
            entry.message = failure
            return START_ERROR_CODE
        if entry.stop_deadline is not None:
            self.stop(pod, max(0.0, entry.stop_deadline - time.monotonic()))
        on_running()
        while any(c.process.poll() is None for c in entry.containers):
            if entry.stop_deadline is not None and time.monotonic() >= entry.stop_deadline:
                self._kill_groups(entry)
            await asyncio.sleep(POLL_SECONDS)
        return self._pod_exit_code(entry)

    def _spawn(self, entry: _Pod, pod: Mapping[str, Any]) -> str:
        """Start every runnable container; returns an error text, or "" on success."""
        assigned: dict[str, tuple[int, int]] = {}
        try:
            for _, container in runnable_containers(pod):
                count = ports_needed(container)
                assigned[str(container.get("name"))] = (self.ports.allocate(count), count)
            specs = process_specs(pod, self.context, {c: p for c, (p, _) in assigned.items()})
            several = len(specs) > 1
            for spec in specs:
                file_name = f"{entry.name}.{spec.container}.log" if several else f"{entry.name}.log"
                log_path = self.run_dir / file_name
                log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(log_path, "ab") as log:
                    # one line (JSON escapes newlines), so a log reader can skip it
                    log.write(f"# edl local: {json.dumps(spec.argv)}\n".encode())
                env = {**spec.env, RUN_MARKER_ENV: str(self.run_dir)}
                process = procs.spawn(spec.argv, env, self.cwd, log_path)
                port, count = assigned.pop(spec.container, (0, 0))
                entry.containers.append(_Container(spec.container, process, log_path, port, count))
        except (OSError, ValueError, RuntimeError) as error:
            self._kill_groups(entry)
            return f"{type(error).__name__}: {error}"
        finally:
            for port, count in assigned.values():  # blocks of containers that never started
                self.ports.release(port, count)
        return ""

    def _pod_exit_code(self, entry: _Pod) -> int:
        """0 if every container exited 0; else the first failure's code (signals as 128+n)."""
        for c in entry.containers:
            code = c.process.returncode
            if code:
                entry.message = log_tail(c.log_path)
                return code if code > 0 else 128 - code
        return 0

    def _kill_groups(self, entry: _Pod, reap_timeout: float = 0.0) -> None:
        """SIGKILL each container's process group; optionally wait to reap the leader.

        Without a timeout the leader is reaped by the supervisor's next poll, so
        the event loop never blocks here.
        """
        for c in entry.containers:
            procs.signal_group(c.process.pid, signal.SIGKILL)
            if reap_timeout > 0:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.process.wait(timeout=reap_timeout)
        # Processes that left the group die with the pod too, as a container's cgroup
        # takes them all on Kubernetes (torch's agent starts its workers in new sessions).
        if entry.containers:
            marker = (RUN_MARKER_ENV, str(self.run_dir))
            for pid in procs.pids_with_env(POD_NAME_ENV, entry.name, marker):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _release_ports(self, entry: _Pod) -> None:
        for c in entry.containers:
            if c.port_count:
                self.ports.release(c.port, c.port_count)
                c.port_count = 0


def log_tail(path: Path, lines: int = MESSAGE_LINES, chars: int = MESSAGE_CHARS) -> str:
    """The end of a log, as Kubernetes' FallbackToLogsOnError puts it in the termination message."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [
        line for line in text.splitlines() if line.strip() and not line.startswith("# edl local:")
    ]
    tail = "\n".join(kept[-lines:])
    return tail[-chars:]
