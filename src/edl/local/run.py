"""`LocalRun`: one TrainingJob on this machine, with the real control plane.

What runs, all in this process except the pods and etcd:

* an embedded etcd (`edl.coord.embedded.EmbeddedEtcd`), the master pod's etcd sidecar;
* `InProcessCluster` on the real clock (`AsyncioClock`) with this machine as its
  one node and `ProcessPodRunner` as kubelet: pods are process groups;
* the `Controller` and the `Autoscaler` — the same code that runs on Kubernetes;
* a monitor loop that folds the cluster, the pods and the master's progress (from
  etcd) into a `RunSnapshot` for the display and ``status.json`` (`edl status`).

The run ends when the TrainingJob's status says Succeeded or Failed (a crashing trainer fails
its Job by the backoffLimit, with a local back-off of 1 s doubling to 5 s), when the master or
the pservers crash-loop (``max_error_exits`` error exits; kills by signal do not count) or a
collective script fails alike (`collective.CrashStreak`), at once on a configuration error
(EX_CONFIG), on a job that can never fit, on an etcd that cannot be restarted (`etcdwatch`), on
a deadline, or on `stop()` (Ctrl-C). Faults become one line each (`events`). Teardown deletes
the workloads first (no controller replaces a pod), then every pod (SIGTERM, SIGKILL), etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from edl.api.trainingjob import TrainingJob
from edl.cluster.inproc import AsyncioClock, InProcessCluster
from edl.cluster.port import ClusterError, NotFoundError
from edl.control.loops import ControlLoops
from edl.coord.embedded import EmbeddedEtcd
from edl.jobparser import JobParser
from edl.local import snapshot as snap
from edl.local.checkpoints import HealthReader, final_word
from edl.local.collective import CollectiveMonitor, CollectiveReader
from edl.local.etcdwatch import keep_etcd_alive
from edl.local.events import EventLog, failover_event
from edl.local.fit import job_footprint, pending_reasons, shortfall
from edl.local.node import local_node
from edl.local.podbook import PodBook
from edl.local.podspec import default_context
from edl.local.process_pods import ProcessPodRunner
from edl.local.progress import ProgressReader
from edl.local.runtypes import (
    FAILED,
    STOPPED,
    SUCCEEDED,
    RunOptions,
    RunResult,
    crash_loop_reason,
    failure_detail,
    reservation_pod,
    scale_reason,
)
from edl.local.stall import StallWatch
from edl.local.status import RunSnapshot, new_run_dir, write_snapshot
from edl.local.teardown import delete_workloads
from edl.local.throughput import ThroughputFeed

log = logging.getLogger(__name__)

LOCAL_BACKOFF_BASE_S = 1.0  # failed-pod replacement back-off of a local run
LOCAL_BACKOFF_MAX_S = 5.0


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
        self._etcd_watch: asyncio.Task[None] | None = None
        self._progress: ProgressReader | None = None
        self._health: HealthReader | None = None  # checkpoint health (pservers or rank 0)
        self._stall = StallWatch(self.options.stall_warning_s, self.options.stall_limit_s)
        # the master's throughput, copied from its progress for the Autoscaler to fit
        self.throughput = ThroughputFeed(self.namespace, self.name)
        self._collective: CollectiveMonitor | None = None  # collective jobs only
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._book = PodBook(self._event, self._fail_now)  # pod lines, crash counts
        self._desired_history: list[tuple[float, int]] = []
        self._started = time.monotonic()
        self._events = EventLog(self._started)
        self._fatal = ""  # set when the run cannot go on (etcd lost, a job that cannot fit)
        self._footprint = job_footprint(self.job)
        self._noticed: set[str] = set()  # pods whose pending reason or start was reported
        self._last_progress: dict[str, Any] | None = None
        self._ever_running = False
        trainer = self.job.spec.trainer
        self.snapshot = RunSnapshot(
            job=self.name,
            namespace=self.namespace,
            run_dir=str(self.run_dir),
            trainers_min=int(trainer.min_instance or 0),
            trainers_max=int(trainer.max_instance or 0),
            passes=self.job.spec.passes,
            mode=self.job.spec.mode or "parameter-server",
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
        checkpoints = self.run_dir / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)  # a promised directory exists
        context = default_context(
            endpoints,
            node["metadata"]["name"],
            os.environ,
            default_env={
                "EDL_CHECKPOINT_DIR": str(checkpoints),
                "EDL_CHECKPOINT_INTERVAL": str(self.options.checkpoint_interval_s),
            },
            workspace_base=str(self.options.job_dir.resolve()),
            # a collective job's manifests name a cluster path; here the run dir's,
            # unless the job's trainer env chose one itself
            override_env={} if self._sets_checkpoint_dir() else {
                "EDL_CHECKPOINT_DIR": str(checkpoints)},
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
        runner = self.pod_runner
        self.cluster.watch_pods(lambda event, pod: self._book.on_pod_event(event, pod, runner))
        self.loops = ControlLoops.new(
            self.cluster,
            self.options.max_load_desired,
            policy=self.options.policy,
            interval=self.options.autoscale_interval_s,
            status_interval=self.options.status_interval_s,
            throughput=self.throughput.board,
        )
        self.throughput.carry_batches(self.loops.autoscaler, endpoints)
        self.loops.start()
        self._etcd_watch = asyncio.create_task(
            keep_etcd_alive(self.etcd, self._event, self._fail_now), name="etcd watch"
        )
        self._progress = ProgressReader(endpoints, self.namespace, self.name)
        if self.job.collective():
            reader = CollectiveReader(endpoints, self.namespace, self.name)
            self._collective = CollectiveMonitor(reader, self.options.max_error_exits)
        # the pservers' checkpoint health, or a collective job's rank 0's (its agent probes)
        self._health = HealthReader(endpoints, self.namespace, self.name)
        self.snapshot = replace(self.snapshot, etcd_endpoints=endpoints)
        self.cluster.create_training_job(self.job.to_dict())
        self._publish(snap.touch(self.snapshot, "Starting", "job submitted"))

    def _event(self, text: str) -> None:
        """One fault or decision: logged, kept in the snapshot, printed by the display."""
        if self._events.add(text):
            log.warning("%s", text)
            self._publish(self.snapshot)

    def _fail_now(self, message: str) -> None:
        self._fatal = self._fatal or message
        self._stop.set()

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
            with contextlib.suppress(TimeoutError):  # (not wait_for: see Autoscaler.run)
                async with asyncio.timeout(self.options.refresh_s):
                    await self._stop.wait()
        if state == SUCCEEDED:
            await self._final_progress()
        self._publish(snap.touch(self.snapshot, "Stopping", message))
        return RunResult(state, message, self.run_dir, self.snapshot)

    async def close(self, result: RunResult | None = None) -> None:
        """Tear everything down; nothing of the run survives this."""
        if self.loops is not None:
            await self.loops.stop()
        if self._etcd_watch is not None:
            self._etcd_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._etcd_watch
        if result is not None and result.state == FAILED and self.cluster is not None:
            with contextlib.suppress(ClusterError):
                await self.cluster.update_training_job_status(
                    self.namespace, self.name, {"state": FAILED, "message": result.message}
                )
        if self.cluster is not None:
            await delete_workloads(self.cluster, self.namespace, self.name)
        if self.pod_runner is not None:
            await self.pod_runner.shutdown(self.options.shutdown_grace_s)
        if self._health is not None and self.etcd is not None:  # after the final checkpoints
            records, lines = await self._health.read()
            for line in lines:
                self._event(line)
            self.snapshot = replace(self.snapshot, checkpoint=final_word(records))
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
            if self._desired_history and self._desired_history[-1][1]:  # not the creation
                resizes = self.loops.autoscaler.last_resizes if (
                    self.loops is not None and self.loops.autoscaler is not None) else {}
                why = scale_reason(resizes, (self.namespace, self.name), counts.desired)
                self._event(f"autoscaler: trainers {self._desired_history[-1][1]} -> "
                            f"{counts.desired}: {why or 'policy ' + self.options.policy}")
            self._desired_history.append((elapsed, counts.desired))
        progress = await self._progress.read() if self._collective is None else None
        if self._health is not None:
            for line in (await self._health.read())[1]:
                self._event(line)
        self._event(failover_event(self._last_progress, progress))
        self._last_progress = progress
        s = snap.apply_trainers(
            self.snapshot, counts.running, counts.desired,
            self.snapshot.trainers_min, self.snapshot.trainers_max,
        )
        s = snap.apply_progress(s, progress)
        if self._collective is not None:
            s = await self._collective.refresh(
                s, time.monotonic() - self._started, self._event, self._fail_now)
        s = self.throughput.fold(s, progress, self.loops.autoscaler if self.loops else None,
                                 self._collective.reader.view.metrics if self._collective else None)
        self._ever_running = self._ever_running or counts.running > 0
        waiting = self._check_pending()
        assert self.pod_runner is not None
        self._book.check_new_pservers(self.pod_runner)
        finished = sum(p.role == "trainer" and p.phase == SUCCEEDED
                       for p in self._book.pods.values())
        state, message = snap.run_state(
            self._ever_running, counts.running, counts.desired, waiting, finished
        )
        self.snapshot = replace(s, desired_history=[list(x) for x in self._desired_history])
        self._refresh_pods()
        self._check_stall(state)
        self._publish(snap.touch(self.snapshot, state, message))

    def _check_stall(self, state: str) -> None:
        """A running job whose progress mark does not move: a line, and at the limit the end."""
        s = self.snapshot
        metrics = self._collective.reader.view.metrics if self._collective else {}
        mark = (s.pass_index, s.tasks_done, s.epoch, s.restarts, tuple(sorted(metrics.items())))
        running = [f"{p.name} (pid {p.pid})" for p in s.pods
                   if p.role == "trainer" and p.phase == "Running"] if state == "Running" else []
        lines, fatal = self._stall.observe(mark, time.monotonic(), running)
        for line in lines:
            self._event(line)
        if fatal:
            self._fail_now(fatal)

    def _check_pending(self) -> str:
        """Pods the scheduler cannot place: fail a job that can never fit, report the rest.

        Returns the first waiting job pod as `<pod>: <reason>` ('' when none waits).
        """
        assert self.cluster is not None
        reasons = pending_reasons(self.cluster.list_pods())
        node = self.cluster.nodes.nodes[0]
        lacking = shortfall(self._footprint, (node.cpu_milli, node.memory_mega, node.gpu))
        waiting = ""
        for name, reason in reasons.items():
            line = self._book.pods.get(name)
            if line is not None:
                self._book.pods[name] = replace(line, message=reason)
            role = line.role if line is not None else ""
            if role in ("master", "pserver", "trainer") and lacking:
                self._fail_now(f"{name} cannot be scheduled: {reason} ({lacking})")
            waiting = waiting or (f"{name}: {reason}" if role != "reservation" else "")
            if role == "reservation" and name not in self._noticed:
                self._noticed.add(name)
                self._event(f"reservation {name} is not placed: {reason}")
        return waiting

    def _sets_checkpoint_dir(self) -> bool:
        """EDL_CHECKPOINT_DIR is the job's own: a parameter-server job's manifests set it only
        from a role's env; a collective job's trainer env may choose it (used here too)."""
        return not self.job.collective() or any(
            v.name == "EDL_CHECKPOINT_DIR" for v in self.job.spec.trainer.env or [])

    async def _final_progress(self, wait_s: float = 10.0) -> None:
        """After success, give the master a moment to publish the last figures (accuracy)."""
        assert self._progress is not None
        if self._collective is not None:  # the agents published the script's last line
            self.snapshot = await self._collective.refresh(
                self.snapshot, time.monotonic() - self._started)
            return
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
        if self._fatal:
            return FAILED, self._fatal
        if self._stop.is_set():
            return STOPPED, self._stop_reason or "stopped"
        failure = self.loops.failure() if self.loops is not None else None
        if failure is not None:
            return FAILED, failure
        watch = self._etcd_watch
        if watch is not None and watch.done() and not watch.cancelled() and watch.exception():
            return FAILED, f"the etcd watch stopped: {watch.exception()!r}"
        crash_loop = crash_loop_reason(self._book.failures, self.options.max_error_exits)
        if crash_loop:
            return FAILED, crash_loop
        status = self._job_status()
        if status.get("state") == SUCCEEDED:
            return SUCCEEDED, status.get("message") or "trainers finished"
        if status.get("state") == FAILED:
            message = failure_detail(status.get("message") or "the job failed", self._book.failures)
            if self._collective is not None:  # the user's own error first
                message = self._collective.reason(message)
            return FAILED, message
        return "", ""

    def _refresh_pods(self) -> None:
        self.snapshot = replace(self.snapshot, pods=self._book.lines(self.pod_runner))

    def _publish(self, snapshot: RunSnapshot) -> None:
        if snapshot.events_total != self._events.total:  # every snapshot carries every event
            snapshot = replace(snapshot, events=[list(e) for e in self._events.events],
                               events_total=self._events.total)
        self.snapshot = snapshot
        try:
            write_snapshot(self.run_dir, snapshot)
        except OSError as error:  # a full disk must not kill the run
            log.warning("status file not written: %s", error)
        if self.on_update is not None:
            self.on_update(snapshot)
