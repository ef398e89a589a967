"""`LocalRun`: one TrainingJob on this machine, with the real control plane.

What runs, all in this process except the pods and etcd:

* an embedded etcd (`edl.coord.embedded.EmbeddedEtcd`) — it replaces the
  master pod's etcd sidecar, which is not run locally;
* `InProcessCluster` on the real clock (`AsyncioClock`) with this machine as its
  one node and `ProcessPodRunner` as kubelet: pods are process groups;
* the `Controller` and the `Autoscaler` — the same code that runs on Kubernetes;
* a monitor loop that folds the cluster, the pods and the master's progress
  (read from etcd) into a `RunSnapshot`, hands it to the display and writes
  ``status.json`` for `edl status`.

The run ends when the TrainingJob's status says Succeeded or Failed, when the
master or the pservers crash-loop, on a deadline, or on `stop()` (Ctrl-C).
Crashing trainers need no rule here: their Job's backoffLimit fails it in the
control plane (with a back-off of 1 s doubling up to 5 s instead of Kubernetes'
10 s to 5 min, so a script that crashes at once fails the run in well under a
minute) and the Controller writes Failed with the error. Master and pserver
pods belong to ReplicaSets, which Kubernetes retries forever; so ``max_error_exits``
of them exiting with an error code end the run (kills by signal do not count, so
chaos tests are not mistaken for broken processes).
Teardown deletes the workloads first (so no controller replaces a pod), then
stops every pod (SIGTERM, SIGKILL after the grace period), then etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edl.api.names import LABEL_ROLE
from edl.api.trainingjob import TrainingJob
from edl.cluster.inproc import AsyncioClock, InProcessCluster
from edl.cluster.port import ClusterError, NotFoundError
from edl.control.loops import ControlLoops
from edl.coord.embedded import EmbeddedEtcd
from edl.jobparser import JobParser, child_names
from edl.local import snapshot as snap
from edl.local.node import local_node
from edl.local.podspec import default_context
from edl.local.process_pods import ProcessPodRunner
from edl.local.progress import ProgressReader
from edl.local.status import PodLine, RunSnapshot, new_run_dir, write_snapshot

log = logging.getLogger(__name__)

SUCCEEDED, FAILED, STOPPED = "Succeeded", "Failed", "Stopped"
MAX_POD_LINES = 40
SIGNAL_EXIT_FLOOR = 128  # exit codes above this are deaths by signal, not script errors
LOCAL_BACKOFF_BASE_S = 1.0  # failed-pod replacement back-off of a local run
LOCAL_BACKOFF_MAX_S = 5.0
JOB_ROLES = ("trainer",)  # roles whose failures the trainer Job's backoffLimit judges


@dataclass(frozen=True)
class RunOptions:
    """Knobs of a local run (the `edl run` flags)."""

    runs_root: Path = Path("runs")
    cpu: str | None = None  # virtual allocatable; None: this machine's cores
    memory: str | None = None  # virtual allocatable; None: this machine's memory
    policy: str = "default"
    max_load_desired: float = 0.97
    autoscale_interval_s: float = 2.0
    status_interval_s: float = 1.0
    refresh_s: float = 0.5
    max_error_exits: int = 3
    shutdown_grace_s: float = 5.0
    timeout_s: float | None = None
    job_dir: Path = field(default_factory=Path.cwd)  # relative workspaces resolve here


@dataclass(frozen=True)
class RunResult:
    state: str  # Succeeded | Failed | Stopped
    message: str
    run_dir: Path
    snapshot: RunSnapshot

    @property
    def ok(self) -> bool:
        return self.state == SUCCEEDED


@dataclass
class _RoleFailures:
    count: int = 0
    last_pod: str = ""
    last_code: int = 0
    last_message: str = ""


class LocalRun:
    """Start with `start()`, wait with `wait()`, always `close()` (or use ``async with``)."""

    def __init__(
        self,
        job: TrainingJob | Mapping[str, Any],
        options: RunOptions | None = None,
        on_update: Callable[[RunSnapshot], None] | None = None,
    ) -> None:
        self.options = options or RunOptions()
        self.job = JobParser().validate(job)  # JobValidationError lists every bad field
        self.name = self.job.metadata.name or ""
        self.namespace = self.job.metadata.namespace or "default"
        self.on_update = on_update
        self.run_dir = new_run_dir(self.options.runs_root.resolve(), self.name)
        self.etcd: EmbeddedEtcd | None = None
        self.pod_runner: ProcessPodRunner | None = None
        self.cluster: InProcessCluster | None = None
        self.loops: ControlLoops | None = None
        self._progress: ProgressReader | None = None
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._failures: dict[str, _RoleFailures] = {}
        self._pods: dict[str, PodLine] = {}
        self._desired_history: list[tuple[float, int]] = []
        self._started = time.monotonic()
        trainer = self.job.spec.trainer
        self.snapshot = RunSnapshot(
            job=self.name,
            namespace=self.namespace,
            run_dir=str(self.run_dir),
            trainers_min=int(trainer.min_instance or 0),
            trainers_max=int(trainer.max_instance or 0),
            passes=self.job.spec.passes,
        )

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> LocalRun:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Bring up etcd, the control plane and the loops, then submit the TrainingJob."""
        self._publish(snap.touch(self.snapshot, "Starting", "starting etcd"))
        self.etcd = EmbeddedEtcd()  # temporary data dir, removed on stop
        await self.etcd.astart()
        endpoints = self.etcd.endpoints
        node = local_node(self.options.cpu, self.options.memory)
        context = default_context(
            endpoints,
            node["metadata"]["name"],
            os.environ,
            default_env={"EDL_CHECKPOINT_DIR": str(self.run_dir / "checkpoints")},
            workspace_base=str(self.options.job_dir.resolve()),
        )
        self.pod_runner = ProcessPodRunner(self.run_dir, context, cwd=self.options.job_dir)
        clock = AsyncioClock()
        self.cluster = InProcessCluster(
            clock,
            self.pod_runner,
            backoff_base_s=LOCAL_BACKOFF_BASE_S,
            backoff_max_s=LOCAL_BACKOFF_MAX_S,
            job_backoff_max_s=LOCAL_BACKOFF_MAX_S,
        )
        self.cluster.add_node(
            node["metadata"]["name"], node["status"]["allocatable"], node["metadata"]["labels"]
        )
        self.cluster.watch_pods(self._on_pod_event)
        self.loops = ControlLoops.new(
            self.cluster,
            self.options.max_load_desired,
            policy=self.options.policy,
            interval=self.options.autoscale_interval_s,
            status_interval=self.options.status_interval_s,
        )
        self.loops.start()
        self._progress = ProgressReader(endpoints, self.namespace, self.name)
        self.snapshot = replace(self.snapshot, etcd_endpoints=endpoints)
        self.cluster.create_training_job(self.job.to_dict())
        self._publish(snap.touch(self.snapshot, "Starting", "job submitted"))

    def stop(self, reason: str = "stopped by the user") -> None:
        """Ask `wait()` to end the run (signal handlers call this)."""
        self._stop_reason = self._stop_reason or reason
        self._stop.set()

    def kill_now(self) -> None:
        """SIGKILL every pod at once (a second Ctrl-C)."""
        self.stop()
        if self.pod_runner is not None:
            self.pod_runner.kill_all()

    async def wait(self) -> RunResult:
        """Monitor until the job ends; returns the outcome (teardown is `close()`)."""
        deadline = (
            self._started + self.options.timeout_s if self.options.timeout_s is not None else None
        )
        while True:
            await self._refresh()
            state, message = self._outcome()
            if not state and deadline is not None and time.monotonic() > deadline:
                state, message = FAILED, f"did not finish within {self.options.timeout_s:.0f} s"
            if state:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.options.refresh_s)
        if state == SUCCEEDED:
            await self._final_progress()
        self._publish(snap.touch(self.snapshot, "Stopping", message))
        return RunResult(state, message, self.run_dir, self.snapshot)

    async def close(self, result: RunResult | None = None) -> None:
        """Tear everything down; nothing of the run survives this."""
        if self.loops is not None:
            await self.loops.stop()
        if result is not None and result.state == FAILED and self.cluster is not None:
            with contextlib.suppress(ClusterError):
                await self.cluster.update_training_job_status(
                    self.namespace, self.name, {"state": FAILED, "message": result.message}
                )
        await self._delete_workloads()
        if self.pod_runner is not None:
            await self.pod_runner.shutdown(self.options.shutdown_grace_s)
        if self._progress is not None:
            await self._progress.close()
        if self.etcd is not None:
            await self.etcd.astop()
            self.etcd = None
        if result is not None:
            self._refresh_pods()
            self._publish(snap.touch(self.snapshot, result.state, result.message))

    # -- what tests and `--reserve` use ------------------------------------------------------
    def reserve(self, name: str, cpu: str, memory: str = "64Mi") -> None:
        """Hold a share of the machine with a plain pod (an idle process), as another tenant."""
        assert self.cluster is not None, "start() first"
        self.cluster.create_pod(reservation_pod(name, self.namespace, cpu, memory))

    def release(self, name: str) -> None:
        assert self.cluster is not None, "start() first"
        with contextlib.suppress(NotFoundError):
            self.cluster.delete_pod(self.namespace, name)

    @property
    def desired_history(self) -> list[tuple[float, int]]:
        """(seconds since start, trainer parallelism) at every change."""
        return list(self._desired_history)

    # -- internals ----------------------------------------------------------------------------
    async def _refresh(self) -> None:
        assert self.cluster is not None and self._progress is not None
        counts = self.cluster.trainer_counts(self.namespace, self.name)
        if not self._desired_history or self._desired_history[-1][1] != counts.desired:
            elapsed = round(time.monotonic() - self._started, 2)
            self._desired_history.append((elapsed, counts.desired))
        progress = await self._progress.read()
        s = snap.apply_trainers(
            self.snapshot, counts.running, counts.desired,
            self.snapshot.trainers_min, self.snapshot.trainers_max,
        )
        s = snap.apply_progress(s, progress)
        job_status = self._job_status()
        state = "Running" if counts.running else "Starting"
        self.snapshot = replace(s, desired_history=[list(x) for x in self._desired_history])
        self._refresh_pods()
        self._publish(snap.touch(self.snapshot, state, job_status.get("message", "")))

    async def _final_progress(self, wait_s: float = 3.0) -> None:
        """After success, give the master a moment to publish the last figures (accuracy)."""
        assert self._progress is not None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            progress = await self._progress.read()
            if progress and progress.get("finished") and (progress.get("metrics") or {}):
                break
            await asyncio.sleep(0.3)
        self.snapshot = snap.apply_progress(self.snapshot, self._progress.latest)

    def _job_status(self) -> dict[str, Any]:
        assert self.cluster is not None
        try:
            job = self.cluster.get_training_job(self.namespace, self.name)
        except NotFoundError:
            return {}
        return dict(job.get("status") or {})

    def _outcome(self) -> tuple[str, str]:
        """(state, message) once the run should end, else ("", "")."""
        if self._stop.is_set():
            return STOPPED, self._stop_reason or "stopped"
        failure = self.loops.failure() if self.loops is not None else None
        if failure is not None:
            return FAILED, failure
        for role, failures in self._failures.items():
            if failures.count >= self.options.max_error_exits:
                detail = failures.last_message.strip().splitlines()
                reason = detail[-1] if detail else f"exit code {failures.last_code}"
                return FAILED, (
                    f"{role} crash loop: {failures.count} {role} pods exited with an error; "
                    f"last {failures.last_pod} (exit {failures.last_code}): {reason}"
                )
        status = self._job_status()
        if status.get("state") == SUCCEEDED:
            return SUCCEEDED, status.get("message") or "trainers finished"
        if status.get("state") == FAILED:
            return FAILED, self._failure_detail(status.get("message") or "the job failed")
        return "", ""

    def _failure_detail(self, message: str) -> str:
        """A Failed status; if it names no failed pod, plus the last master/pserver error seen.

        The Controller's message already ends with the last failed trainer's error.
        """
        if "last failed" in message:
            return message
        role, last = max(
            self._failures.items(), key=lambda item: item[1].count, default=("", None)
        )
        if last is None or not last.last_message:
            return message
        return f"{message}; last {role} error: {last.last_message.strip().splitlines()[-1]}"

    def _on_pod_event(self, event: str, pod: Any) -> None:
        """Pod transitions from the control plane: phases for the display, crash counting."""
        name, role = pod.name, pod.role or "pod"
        if event == "exited":
            code = int((pod.manifest.get("status") or {}).get("exitCode", 0))
            message = self.pod_runner.termination_message(name) if self.pod_runner else ""
            phase = "Succeeded" if code == 0 else "Failed"
            self._pods[name] = PodLine(name, role, phase, None, code, _last_line(message))
            if 0 < code < SIGNAL_EXIT_FLOOR and not pod.terminating and role not in JOB_ROLES:
                failures = self._failures.setdefault(role, _RoleFailures())
                failures.count += 1
                failures.last_pod, failures.last_code, failures.last_message = name, code, message
                log.warning("%s exited with code %d: %s", name, code, _last_line(message))
        else:
            phase = "Terminating" if pod.terminating else str(pod.phase)
            previous = self._pods.get(name)
            self._pods[name] = PodLine(name, role, phase, previous.pid if previous else None)
        if len(self._pods) > MAX_POD_LINES:
            for old in [n for n, p in self._pods.items() if p.exit_code is not None][:10]:
                del self._pods[old]

    def _refresh_pods(self) -> None:
        pids = {}
        if self.pod_runner is not None:
            pids = {r.name: r.pids[0] for r in self.pod_runner.records() if r.pids}
        lines = [
            replace(p, pid=pids.get(p.name)) if p.exit_code is None else p
            for p in self._pods.values()
        ]
        self.snapshot = replace(self.snapshot, pods=lines)

    def _publish(self, snapshot: RunSnapshot) -> None:
        self.snapshot = snapshot
        try:
            write_snapshot(self.run_dir, snapshot)
        except OSError as error:  # a full disk must not kill the run
            log.warning("status file not written: %s", error)
        if self.on_update is not None:
            self.on_update(snapshot)

    async def _delete_workloads(self) -> None:
        """Delete trainers first (they hand tasks back), then the master and pservers."""
        cluster = self.cluster
        if cluster is None:
            return
        names = child_names(self.name)
        steps = [
            (cluster.delete_trainer_job, names["trainer"]),
            (cluster.delete_replica_set, names["pserver"]),
            (cluster.delete_replica_set, names["master"]),
            (cluster.delete_service, names["master"]),
        ]
        for delete, child in steps:
            with contextlib.suppress(ClusterError):
                await delete(self.namespace, child)
        with contextlib.suppress(ClusterError):
            cluster.delete_training_job(self.namespace, self.name)
        for pod in cluster.list_pods():  # reservations and other bare pods
            with contextlib.suppress(ClusterError):
                cluster.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])


def reservation_pod(name: str, namespace: str, cpu: str, memory: str) -> dict[str, Any]:
    """A pod that only holds resources: an idle process that exits on SIGTERM."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_ROLE: "reservation"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "hold",
                    "command": ["python", "-c", "import signal; signal.pause()"],
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
