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
* a job with ``noise_scale`` counts its work in samples at its initial batch
  (`sim/noisy_work.py`): a larger total batch makes each sample worth less. Its
  batch is the per-trainer batch it declared times its contributing trainers,
  unless a policy chose one (annotation ``edl.dev/batch-size`` on its trainer Job);
  the job takes the chosen batch only when its trainers change (a restart) or at an
  epoch boundary (`Work.epoch_samples`) — a parameter-server job (``batch_change:
  task``) or a live collective job (``step``) at its master's next publication, a
  restarting collective job (``restart``) only when its world next re-forms (a resize
  or a failure: no restart of its own, no epoch boundary) — and its master publishes
  the batch, a
  noisy φ and a noisy compute rate (one trainer's samples/s without the per-step
  overhead) with each measurement;
* a job with ``resize_pause_s`` stops whole for a drawn pause at every change of its
  contributing trainers (a collective job's restart or live re-formation; overlapping
  pauses merge), and its master publishes the latest pause with the resize count;
* when the work is done its running trainers exit 0 and pending ones are deleted,
  so the trainer Job completes and the Controller marks the TrainingJob
  Succeeded through the real path; ``cleanup_after_s`` later the job is deleted
  (what a user or a TTL would do), freeing its master and pservers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from dataclasses import dataclass, field

from edl.api.names import ANNOTATION_BATCH_SIZE, trainer_job_name
from edl.cluster.inproc.clock import VirtualClock
from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.pods import PodRecord
from edl.cluster.inproc.simulated_pods import SimulatedPodRunner
from edl.cluster.port import NotFoundError, Timer
from edl.sim.noisy_work import NoiseRamp, progress_after, seconds_to
from edl.sim.scenario import JobPlan
from edl.sim.work_spec import Work
from edl.throughput.batch import BatchLimits, compute_rate, throughput_at
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
    limits: BatchLimits | None = None  # with a noise ramp: the job's batch bounds
    ramp: NoiseRamp | None = None
    chosen: float | None = None  # the batch a policy chose and the job applied
    paused_until: float = float("-inf")  # a resize's pause: no progress until then
    pauses: int = 0  # resizes paused for (published with the latest pause)
    last_pause: float = 0.0

    @property
    def batch(self) -> float:
        """The total batch it runs at now (noise-limited jobs only)."""
        assert self.limits is not None
        n = len(self.contributing)
        return self.chosen if self.chosen is not None else self.limits.fixed(n)

    @property
    def rate(self) -> float:
        n = len(self.contributing)
        if self.limits is None or self.chosen is None:
            return self.curve.rate(n)
        return throughput_at(self.curve, n, self.chosen, self.limits.base)

    def seconds_to(self, target: float) -> float:
        """Seconds until ``target`` samples are done at the current rate and batch."""
        if self.ramp is None or self.limits is None:
            rate = self.rate
            return (target - self.done) / rate if rate > 0 else float("inf")
        return seconds_to(
            self.done / self.total, target / self.total, rate=self.rate, batch=self.batch,
            initial=self.limits.initial, ramp=self.ramp, total=self.total,
        )


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
        # pauses from a stream of their own: a scenario without them keeps its noise draws
        self._pause_rng = random.Random(repr(rng.getstate()[1][:4]))
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
        if work.noise_scale is not None and work.initial_batch is not None:
            start = plan.start_trainers or _min_trainers(plan)
            job.limits = BatchLimits(
                work.initial_batch, start, max(work.initial_batch, work.max_batch or 0)
            )
            job.ramp = NoiseRamp(work.noise_scale.start, work.noise_scale.end)
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
                self._pause(job)
                self._restart_batch(job)
                self._reschedule(job)

    def _join(self, job: _JobWork, uid: str) -> None:
        job.joining.pop(uid, None)
        if job.finished_at is not None:
            return
        self._advance(job)
        if job.contributing:  # a world to change (the first trainer starts one)
            job.contributing.add(uid)
            self._pause(job)
        job.contributing.add(uid)
        self._restart_batch(job)
        self._reschedule(job)

    def _pause(self, job: _JobWork) -> None:
        """The world changed: a job with resize pauses stops for one (drawn per resize)."""
        spec = job.work.resize_pause_s
        if spec is None or not job.contributing:  # no world left to pause
            return
        pause = self._pause_rng.uniform(spec.min, spec.max)
        job.paused_until = max(job.paused_until, self.clock.now() + pause)
        job.pauses += 1
        job.last_pause = pause

    def _restart_batch(self, job: _JobWork) -> None:
        """At a restart or epoch boundary: take the batch the policy chose, if any."""
        if job.limits is None:
            return
        namespace, name = job.plan.namespace, job.plan.name
        try:
            trainer = self.cluster.store.get("Job", namespace, trainer_job_name(name))
        except NotFoundError:
            return
        text = (trainer["metadata"].get("annotations") or {}).get(ANNOTATION_BATCH_SIZE)
        try:
            chosen = float(text) if text is not None else None
        except ValueError:
            chosen = None
        if chosen is not None:
            low, high = job.limits.bounds(len(job.contributing))
            chosen = min(float(high), max(float(low), chosen))
        job.chosen = chosen

    # -- progress --------------------------------------------------------------------------
    def _advance(self, job: _JobWork) -> None:
        now = self.clock.now()
        elapsed = now - max(job.updated_at, min(now, job.paused_until))  # a pause does nothing
        if job.ramp is None or job.limits is None:
            job.done = min(job.total, job.done + job.rate * elapsed)
        else:
            progress = progress_after(
                job.done / job.total, elapsed, rate=job.rate, batch=job.batch,
                initial=job.limits.initial, ramp=job.ramp, total=job.total,
            )
            job.done = min(job.total, progress * job.total)
        job.updated_at = now

    def _reschedule(self, job: _JobWork) -> None:
        if job.finish_timer is not None:
            job.finish_timer.cancel()
            job.finish_timer = None
        rate = job.rate
        if rate <= 0:
            return
        paused = max(0.0, job.paused_until - self.clock.now())
        if job.ramp is None:
            left = max(0.0, job.total - job.done)
            job.finish_timer = self.clock.call_later(paused + left / rate, self._finish, job)
            return
        # the next epoch boundary or the end, whichever comes first
        epoch = job.work.epoch_samples
        boundary = (math.floor(job.done / epoch * (1 + 1e-12)) + 1) * epoch
        delay = paused + max(0.0, job.seconds_to(min(job.total, boundary)))
        job.finish_timer = self.clock.call_later(delay, self._finish, job)

    def _finish(self, job: _JobWork) -> None:
        job.finish_timer = None
        self._advance(job)
        if job.total - job.done > _EPSILON_SAMPLES * max(1.0, job.total):
            if job.work.batch_change != "restart":  # a restart job's waits for a resize
                self._restart_batch(job)  # an epoch boundary (or float drift)
            self._reschedule(job)
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
        if job.work.batch_change in ("task", "step") and job.limits is not None:
            self._restart_batch(job)  # the next tasks or steps carry the chosen batch
            self._reschedule(job)
        count = len(job.contributing)
        if count:
            noise = max(0.0, 1.0 + self._rng.gauss(0.0, job.work.noise)) if job.work.noise else 1.0
            observation = Observation(
                self.clock.now(), count, job.rate * noise, job.total - job.done
            )
            if job.ramp is not None:  # the runtime measures φ too (noisily)
                phi = job.ramp.at(job.done / job.total)
                single = compute_rate(job.curve, count)
                if job.work.noise:
                    phi *= max(0.1, 1.0 + self._rng.gauss(0.0, job.work.noise))
                    single *= max(0.1, 1.0 + self._rng.gauss(0.0, job.work.noise))
                observation = dataclasses.replace(
                    observation, batch=job.batch, noise_scale=phi, compute_rate=single
                )
            if job.pauses:  # the latest resize's pause, as the runtime measures it
                observation = dataclasses.replace(
                    observation, resize_pause_s=job.last_pause, resizes=job.pauses
                )
            self.board.publish(*key, observation)
        job.publish_timer = self.clock.call_later(job.work.publish_every_s, self._publish, key)

    def progress(self, name: str, namespace: str = "default") -> float | None:
        """Fraction of the job's work done (None: no work declared)."""
        job = self._jobs.get((namespace, name))
        if job is None:
            return None
        if job.finished_at is None:
            self._advance(job)
        return job.done / job.total


def _min_trainers(plan: JobPlan) -> int:
    if plan.group.trainer is not None:
        return plan.group.trainer.min
    spec = plan.group.spec or {}
    return int(spec.get("spec", {}).get("trainer", {}).get("min-instance", 1))
