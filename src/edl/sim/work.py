"""Jobs that finish: the scenario's training work, done by running trainers on virtual time.

What it models, and how faithfully:

* a trainer *contributes* from ``join_cost_s`` after it is Running (start-up: the
  runtime connecting, pulling parameters, getting its first task) until it is
  deleted (a draining trainer returns its task at once, so it stops contributing
  when its deletion starts). Others never stop for a join — as edl's trainers;
* the job's throughput is the declared curve of its contributing trainers,
  exactly (no stragglers, no per-task variance); progress is integrated piecewise
  between changes, and completion is an exact timer, not a sampled check;
* the simulated master publishes what a real master measures: samples/s with
  multiplicative Gaussian noise (``noise``, seeded) against the contributing
  count, every ``publish_every_s``, with the samples left;
* when the work is done its running trainers exit 0 and pending ones are deleted,
  so the trainer Job completes and the Controller marks the TrainingJob
  Succeeded through the real path; ``cleanup_after_s`` later the job is deleted
  (what a user or a TTL would do), freeing its master and pservers.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field

from edl.cluster.inproc.clock import VirtualClock
from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.pods import PodRecord
from edl.cluster.inproc.simulated_pods import SimulatedPodRunner
from edl.cluster.port import NotFoundError, Timer
from edl.sim.scenario import JobPlan
from edl.sim.work_spec import Work
from edl.throughput.board import ThroughputBoard
from edl.throughput.curve import Curve
from edl.throughput.fit import Observation

__all__ = ["SimulatedTraining"]

_EPSILON_SAMPLES = 1e-6


@dataclass
class _JobWork:
    plan: JobPlan
    work: Work
    curve: Curve
    total: float
    done: float = 0.0
    updated_at: float = 0.0
    contributing: set[str] = field(default_factory=set)  # pod uids
    joining: dict[str, Timer] = field(default_factory=dict)
    finish_timer: Timer | None = None
    publish_timer: Timer | None = None
    finished_at: float | None = None

    @property
    def rate(self) -> float:
        return self.curve.rate(len(self.contributing))


class SimulatedTraining:
    """Tracks every job with work; ``completions`` maps job name -> time its work ended."""

    def __init__(
        self,
        cluster: InProcessCluster,
        runtime: SimulatedPodRunner,
        clock: VirtualClock,
        board: ThroughputBoard,
        rng: random.Random,
        plans: list[JobPlan],
    ) -> None:
        self.cluster, self.runtime, self.clock, self.board = cluster, runtime, clock, board
        self._rng = rng
        self._jobs: dict[tuple[str, str], _JobWork] = {}
        self._plans = {(plan.namespace, plan.name): plan for plan in plans if plan.work}
        self.completions: dict[str, float] = {}
        cluster.watch_pods(self._on_pod)

    def submitted(self, plan: JobPlan) -> None:
        """The job was created: start its work (and its master's publishing) from zero."""
        work = plan.work
        if work is None:
            return
        key = (plan.namespace, plan.name)
        job = self._jobs[key] = _JobWork(
            plan, work, work.throughput.curve(), work.total_samples, updated_at=self.clock.now()
        )
        job.publish_timer = self.clock.call_later(work.publish_every_s, self._publish, key)

    # -- pods ------------------------------------------------------------------------------
    def _on_pod(self, event: str, pod: PodRecord) -> None:
        if pod.role != "trainer":
            return
        job = self._jobs.get((pod.namespace, pod.job))
        if job is None or job.finished_at is not None:
            return
        if event == "running":
            delay = job.work.join_cost_s
            if delay <= 0:
                self._join(job, pod.uid)
            else:
                job.joining[pod.uid] = self.clock.call_later(delay, self._join, job, pod.uid)
        elif event in ("deleting", "exited"):
            timer = job.joining.pop(pod.uid, None)
            if timer is not None:
                timer.cancel()
            if pod.uid in job.contributing:
                self._advance(job)
                job.contributing.discard(pod.uid)
                self._reschedule(job)

    def _join(self, job: _JobWork, uid: str) -> None:
        job.joining.pop(uid, None)
        if job.finished_at is not None:
            return
        self._advance(job)
        job.contributing.add(uid)
        self._reschedule(job)

    # -- progress --------------------------------------------------------------------------
    def _advance(self, job: _JobWork) -> None:
        now = self.clock.now()
        job.done = min(job.total, job.done + job.rate * (now - job.updated_at))
        job.updated_at = now

    def _reschedule(self, job: _JobWork) -> None:
        if job.finish_timer is not None:
            job.finish_timer.cancel()
            job.finish_timer = None
        rate = job.rate
        if rate > 0:
            left = max(0.0, job.total - job.done)
            job.finish_timer = self.clock.call_later(left / rate, self._finish, job)

    def _finish(self, job: _JobWork) -> None:
        job.finish_timer = None
        self._advance(job)
        if job.total - job.done > _EPSILON_SAMPLES * max(1.0, job.total):
            self._reschedule(job)  # float drift: not quite there yet
            return
        now = self.clock.now()
        job.finished_at = now
        self.completions[job.plan.name] = now
        for timer in (*job.joining.values(), job.publish_timer):
            if timer is not None:
                timer.cancel()
        job.joining.clear()
        job.contributing.clear()
        key = (job.plan.namespace, job.plan.name)
        trainers = [
            pod
            for pod in self.cluster.pod_records()
            if pod.role == "trainer" and (pod.namespace, pod.job) == key and not pod.terminating
        ]
        # exits first: once a pod succeeded the Job creates no more, and the pending
        # ones must go so it can complete
        waiting = [pod for pod in trainers if not self.runtime.finish(pod.uid, 0)]
        for pod in waiting:
            with contextlib.suppress(NotFoundError):
                self.cluster.delete_pod(pod.namespace, pod.name)
        self.clock.call_later(job.work.cleanup_after_s, self._cleanup, key)

    def _cleanup(self, key: tuple[str, str]) -> None:
        with contextlib.suppress(NotFoundError):
            self.cluster.delete_training_job(*key)
        self.board.forget(*key)

    def deleted(self, plan: JobPlan) -> None:
        """The scenario deleted the job before its work was done: stop tracking it."""
        job = self._jobs.get((plan.namespace, plan.name))
        if job is None or job.finished_at is not None:
            return
        job.finished_at = float("nan")
        for timer in (*job.joining.values(), job.publish_timer, job.finish_timer):
            if timer is not None:
                timer.cancel()

    # -- the master's measurements ---------------------------------------------------------
    def _publish(self, key: tuple[str, str]) -> None:
        job = self._jobs[key]
        if job.finished_at is not None:
            return
        self._advance(job)
        count = len(job.contributing)
        if count:
            noise = max(0.0, 1.0 + self._rng.gauss(0.0, job.work.noise)) if job.work.noise else 1.0
            self.board.publish(
                *key,
                Observation(self.clock.now(), count, job.rate * noise, job.total - job.done),
            )
        job.publish_timer = self.clock.call_later(job.work.publish_every_s, self._publish, key)

    def progress(self, name: str, namespace: str = "default") -> float | None:
        """Fraction of the job's work done (None: no work declared)."""
        job = self._jobs.get((namespace, name))
        if job is None:
            return None
        if job.finished_at is None:
            self._advance(job)
        return job.done / job.total
