"""`Autoscaler`: every few seconds, re-plan every job's trainer count and apply it.

PaddlePaddle EDL's Autoscaler, async and backend-free. The single writer of every
trainer Job's parallelism: a fixed-size job (min-instance = max-instance) is planned
too, so an edit of its size (``kubectl scale``) reaches its Job. One step is `tick()`:

1. per job, its trainer Job (current parallelism, an API read on Kubernetes);
2. ``Cluster.inquiry_resource()`` — totals, requests, per-node room, pending services —
   and each job's ``job_pods`` counts -> `edl.policy.JobView`, read together after
   every wait (one snapshot of the caches, see `_observe`);
3. ``policy.plan(views, resources, max_load_desired)`` — pure;
4. ``update_trainer_job`` with the new parallelism, re-reading and retrying on
   `ConflictError` (someone else wrote the Job meanwhile). On a shrink whose
   Decision names ``victim_nodes``, and on a cluster that offers
   `edl.cluster.port.VictimScaling`, the trainers on those nodes are named to
   leave (``scale_trainer_job``) instead of the Job controller's own choice. On a
   growth whose Decision names ``placement``, the same write carries those nodes
   (`edl.control.placement`): the new trainers prefer them.

`run()` ticks every ``interval`` seconds and, at once, when the Controller reports
a job event (`on_add`/`on_update`/`on_del`) or the cluster reports pods that do
not fit (``watch_unschedulable``) — so a service scaling up gets room within
one pod start, not one interval. Bursts of events coalesce into one tick, and
event-driven ticks are at least ``min_event_gap`` seconds apart.

Nothing here knows whether time is real: waiting is `asyncio.sleep` /
`asyncio.wait` on the running loop, which is virtual under the simulator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from edl.accounting import ClusterResource, trainer_request
from edl.accounting.admitted import AdmittedTrainer
from edl.accounting.eligibility import constraints_of
from edl.accounting.kueue import queued, size_is_kueues
from edl.accounting.request import extended_request
from edl.api.names import ANNOTATION_BATCH_SIZE, job_key, trainer_job_name
from edl.api.trainingjob import TrainingJob
from edl.cluster.port import (
    Cluster,
    ClusterError,
    ConflictError,
    Manifest,
    NotFoundError,
    TrainerPod,
    VictimScaling,
)
from edl.control.admitted_views import explained, with_admission
from edl.control.batch_publish import BatchPublisher, reads_batch
from edl.control.job_reads import (
    batch_limits,
    chosen_batch,
    resize_rule,
    trainer_job_done,
    trainer_pod_labels,
    trainer_pod_spec,
)
from edl.control.placement import annotate
from edl.control.scaling import ScalingTracker
from edl.policy import Decision, JobView, Policy, Trainer, get_policy
from edl.policy.base import Scaling
from edl.policy.collective import CollectiveResizes
from edl.throughput.board import ThroughputSource

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
DEFAULT_MAX_LOAD_DESIRED = 0.97
DEFAULT_MIN_EVENT_GAP_S = 1.0
CONFLICT_RETRIES = 5


def pick_victims(
    pods: Sequence[TrainerPod],
    target: int,
    victim_nodes: Sequence[str],
    named: Sequence[str] = (),
) -> list[str]:
    """Names of the bound trainer pods to delete so that `target` remain, best first.

    Pods bound to no node are left to the Job controller, which removes them first
    anyway (they hold no room); only the rest of the surplus is named: the pods the
    plan `named` first (those still there), then from the nodes in `victim_nodes`
    order (nodes not listed last, by name).
    """
    live = [pod for pod in pods if not pod.leaving]
    unbound = sum(1 for pod in live if not pod.node)
    count = len(live) - target - unbound
    if count <= 0:
        return []
    chosen = {name: index for index, name in enumerate(named)}
    rank = {node: index for index, node in enumerate(victim_nodes)}
    last = len(rank)
    bound = sorted(
        (pod for pod in live if pod.node),
        key=lambda pod: (
            chosen.get(pod.name, len(chosen)),
            rank.get(pod.node, last),
            pod.node,
            pod.name,
        ),
    )
    return [pod.name for pod in bound[:count]]


class Autoscaler:
    """Scales the trainers of elastic TrainingJobs to fit the cluster.

    Args:
        cluster: any `Cluster`.
        policy: a `Policy` or its name (`edl.policy.get_policy`).
        max_load_desired: the fraction of the cluster the policy may fill (0.97).
        interval: seconds between periodic ticks (5).
        min_event_gap: least seconds between event-driven ticks (1).
        throughput: where the jobs' measured throughput is read (`edl.throughput`);
            with it, or a job's declared prior, views carry `JobView.scaling`.
    """

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy | str = "default",
        max_load_desired: float = DEFAULT_MAX_LOAD_DESIRED,
        interval: float = DEFAULT_INTERVAL_S,
        min_event_gap: float = DEFAULT_MIN_EVENT_GAP_S,
        throughput: ThroughputSource | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        self.max_load_desired = max_load_desired
        self.interval = interval
        self.min_event_gap = min_event_gap
        self._jobs: dict[tuple[str, str], TrainingJob] = {}
        self._trainer_resources: dict[tuple[str, str], Any] = {}
        self.collective = CollectiveResizes()  # collective jobs: allowed sizes, cooldown
        self._wake: asyncio.Event | None = None
        self._kicked = True  # the first run() iteration ticks at once
        self.ticks = 0
        self.last_decisions: list[Decision] = []
        # per job, the last decision that changed its size (why, for a reader that polls)
        self.last_resizes: dict[tuple[str, str], Decision] = {}
        self.scaling = ScalingTracker(throughput)
        self._batches: dict[tuple[str, str], float | None] = {}  # chosen, per trainer Job
        self._held: dict[tuple[str, str], str] = {}  # jobs admission keeps from growing: why
        self.batches = BatchPublisher()  # .sink: where collective workers read the batch

    # -- PaddlePaddle EDL's notifications -----------------------------------------------
    def on_add(self, job: TrainingJob) -> None:
        """A (valid) job was added: plan it at once."""
        self._remember(job)
        self.kick()

    def on_update(self, job: TrainingJob) -> None:
        """A job's spec changed (e.g. its min/max): re-plan at once."""
        self._remember(job)
        self.kick()

    def on_del(self, job: TrainingJob) -> None:
        """A job was deleted: its room is free for the others."""
        key = job_key(job)
        self._jobs.pop(key, None)
        self._trainer_resources.pop(key, None)
        self.scaling.forget(key)
        self.collective.forget(key)
        self.batches.forget(key)
        self.last_resizes.pop(key, None)
        self.kick()

    def kick(self) -> None:
        """Ask `run()` for a tick as soon as possible (cheap; safe to call often)."""
        if self._wake is not None:
            self._wake.set()
        else:
            self._kicked = True  # remembered until run() starts

    # -- the loop ---------------------------------------------------------------------------------
    @staticmethod
    async def _woken_within(wake: asyncio.Event, interval: float) -> bool:
        """Whether `wake` was set within `interval` seconds.

        Not `asyncio.wait_for`: on Python 3.11 it returns, swallowing the cancellation,
        when the event is set in the same loop iteration as the task is cancelled, so a
        kick at the moment of `stop()` kept this loop ticking for ever.
        """
        waiter = asyncio.ensure_future(wake.wait())
        try:
            done, _ = await asyncio.wait({waiter}, timeout=interval)
        finally:
            waiter.cancel()
        return bool(done)

    async def run(self) -> None:
        """Tick every ``interval`` seconds and on every kick, forever."""
        self._wake = asyncio.Event()
        if self._kicked:
            self._wake.set()
            self._kicked = False
        unsubscribe = self.cluster.watch_unschedulable(self.kick)
        loop = asyncio.get_running_loop()
        last_event_tick = float("-inf")
        try:
            while True:
                woken = await self._woken_within(self._wake, self.interval)
                if woken:
                    gap = last_event_tick + self.min_event_gap - loop.time()
                    if gap > 0:
                        await asyncio.sleep(gap)
                    last_event_tick = loop.time()
                self._wake.clear()
                try:
                    await self.tick()
                except ClusterError as error:  # keep going: the next tick re-reads everything
                    log.warning("autoscaler tick failed: %s", error)
                except Exception:  # a bug in one tick must not stop autoscaling for good
                    log.exception("autoscaler tick failed")
        finally:
            unsubscribe()
            self._wake = None

    async def tick(self) -> list[Decision]:
        """One step: observe, plan, actuate. Returns the decisions (changed or not)."""
        self.ticks += 1
        resources, views = await self._observe()
        if not views:
            self.last_decisions = []
            return []
        now = asyncio.get_running_loop().time()
        if log.isEnabledFor(logging.DEBUG):  # the plan's inputs, to explain a decision
            log.debug(
                "tick inputs: cpu requested %d of %d milli, %d pending pods; %s",
                resources.cpu_request_milli, resources.cpu_total_milli,
                len(resources.pending),
                "; ".join(f"{v.name} parallelism {v.parallelism} total {v.total} running "
                          f"{v.running} pending {v.pending}" for v in views),
            )
        decisions = self.policy.plan(views, resources, self.max_load_desired)
        decisions = explained(decisions, self._held)  # admission: why a job is not grown
        decisions = self.collective.apply(decisions, now)  # allowed sizes, cooldown
        for decision in decisions:
            if decision.target != decision.parallelism:
                self.scaling.resized(
                    (decision.namespace, decision.name),
                    decision.diff,
                    asyncio.get_running_loop().time(),
                )
                log.info("scale %s/%s trainers %d -> %d: %s", decision.namespace,
                         decision.name, decision.parallelism, decision.target, decision.reason)
                await self._scale(decision)
                self.collective.resized((decision.namespace, decision.name), now)
                self.last_resizes[(decision.namespace, decision.name)] = decision
            elif self._batch_changes(decision):
                log.info("batch %s/%s -> %d: %s", decision.namespace, decision.name,
                         decision.batch, decision.reason)
                await self._scale(decision)
        await self.batches.publish(self._batches, decisions,
                                   lambda key: reads_batch(self._jobs.get(key)))
        self.last_decisions = decisions
        return decisions

    def decision_for(self, key: tuple[str, str]) -> Decision | None:
        """The last plan's decision for a job (None: not planned yet)."""
        for decision in self.last_decisions:
            if (decision.namespace, decision.name) == key:
                return decision
        return None

    # -- internals ---------------------------------------------------------------------------
    def _batch_changes(self, decision: Decision) -> bool:
        if decision.batch is None:
            return False
        return self._batches.get((decision.namespace, decision.name)) != float(decision.batch)

    def _remember(self, job: TrainingJob) -> None:
        key = job_key(job)  # fixed-size jobs too: their edited size reaches the Job here
        self._jobs[key] = job
        self._trainer_resources[key] = trainer_request(job)
        self.scaling.remember(key, job.metadata.annotations, batch_limits(job))
        self.collective.remember(key, resize_rule(job))

    async def _trainer_job(self, job: TrainingJob) -> Manifest | None:
        try:
            return await self.cluster.get_trainer_job(job)
        except NotFoundError:
            return None  # not created yet, or being deleted

    async def _job_views(self) -> Sequence[JobView]:
        return (await self._observe())[1]

    async def _observe(self) -> tuple[ClusterResource, list[JobView]]:
        """The room and every elastic job's view, as one consistent snapshot.

        The reads that wait (each trainer Job from the API, each job's measured
        throughput) come first; then the cluster's resources and the jobs' pods are
        read from the caches with no wait in between. Interleaved, a watch event
        landing between them tore the snapshot: a leaving trainer removed after the
        resources were read still counted in the CPU requests but no longer as
        leaving, so the plan saw the cluster over max load and shrank a job once more
        (seen on the real control plane: tests/e2e/test_fidelity.py, docs/fidelity.md).
        """
        jobs = list(self._jobs.items())
        # One read per job, all at once: on Kubernetes each is an API round trip, and
        # one after another they made a tick with 20 jobs take ~0.5 s (tests/e2e).
        trainers = await asyncio.gather(*(self._trainer_job(job) for _, job in jobs))
        now = asyncio.get_running_loop().time()
        # queued (suspended) or sized by Kueue's admission: Kueue's call (edl.accounting.kueue)
        live = [(key, job, trainer) for (key, job), trainer in zip(jobs, trainers, strict=True)
                if trainer is not None and not trainer_job_done(trainer)
                and not (trainer.get("spec") or {}).get("suspend")
                and not size_is_kueues(trainer)]
        self._batches = {key: chosen_batch(trainer) for key, _, trainer in live}
        caps = await self._kueue_caps(live)
        admitted = await self._admitted(live)
        self._held = {key: a.problem for key, a in admitted.items() if a.problem}
        scalings = [
            self._priced(key, await self.scaling.scaling(key, now, self._batches[key]))
            for key, _, _ in live
        ]
        # From here on: cache reads only (nothing yields to the event loop).
        resources = await self.cluster.inquiry_resource()
        views = []
        for (key, job, trainer), scaling in zip(live, scalings, strict=True):
            pods = await self.cluster.job_pods(job)
            # JobView counts as Kubernetes reports phases: terminating pods are still
            # Running and hold their room, so the policy can credit room on its way.
            leaving = pods.terminating or 0
            per_pod = self._trainer_resources.get(key)
            if per_pod is None:  # the job was deleted during this tick's awaits
                continue
            pod_spec = trainer_pod_spec(trainer)
            if pod_spec:  # what the trainer pods really ask for and where they may go
                per_pod = replace(per_pod, extended=extended_request(pod_spec))
            listed = None
            if isinstance(self.cluster, VictimScaling):  # where each trainer runs
                pods_listed = await self.cluster.trainer_pods(job, leaving=True)
                listed = tuple(Trainer(p.name, p.node, p.leaving) for p in pods_listed)
            views.append(with_admission(
                JobView.from_pod_resources(
                    *key,
                    min_instance=int(job.spec.trainer.min_instance or 0),
                    max_instance=_capped(int(job.spec.trainer.max_instance or 0),
                                         int(job.spec.trainer.min_instance or 0),
                                         caps.get(key)),
                    parallelism=int(trainer["spec"].get("parallelism", 1)),
                    per_pod=per_pod,
                    total=pods.total + leaving,
                    running=pods.running + leaving,
                    pending=pods.pending,
                    unscheduled=pods.unscheduled,
                    trainers=listed,
                    scaling=scaling,
                    constraints=constraints_of(pod_spec, trainer_pod_labels(trainer)),
                    priority_class=str(pod_spec.get("priorityClassName") or ""),
                    terminating=pod_spec.get("activeDeadlineSeconds") is not None,
                ), admitted.get(key)))
        return resources, views

    async def _admitted(self, live: Sequence[tuple[tuple[str, str], TrainingJob, Manifest]]
                        ) -> dict[tuple[str, str], AdmittedTrainer]:
        """Per job, its trainer pod as admission makes it, where the cluster can tell
        (Kubernetes: a cached server-side dry-run create, `edl.kube.dry_run`)."""
        read = getattr(self.cluster, "admitted_trainer", None)
        if read is None:
            return {}
        answers = await asyncio.gather(*(read(trainer) for _, _, trainer in live))
        return {key: a for (key, _, _), a in zip(live, answers, strict=True) if a is not None}

    async def _kueue_caps(self, live: Sequence[tuple[tuple[str, str], TrainingJob, Manifest]]
                          ) -> dict[tuple[str, str], int]:
        """Per elastic job Kueue admitted, the most trainers its ClusterQueue can admit
        (`edl.accounting.kueue`): a growth past it would wait whole behind the gate."""
        read = getattr(self.cluster, "queue_room", None)
        if read is None:
            return {}
        caps = {}
        for key, _, trainer in live:
            if queued(trainer):
                cap = await read(trainer)
                if cap is not None:
                    caps[key] = int(cap)
        return caps

    def _priced(self, key: tuple[str, str], scaling: Scaling | None) -> Scaling | None:
        """A collective job's Scaling carries the pause one resize costs its world: as
        measured (the tracker's), else its mode's default until a resize is measured."""
        rule = self.collective.rules.get(key)
        if scaling is None or rule is None or scaling.pause_source:
            return scaling
        mode = "live" if rule.live else "restart"
        return replace(scaling, resize_pause_s=rule.pause_s,
                       pause_source=f"{mode} resize default (none measured yet)")

    async def _scale(self, decision: Decision) -> None:
        """Set the trainer Job's parallelism (naming the leaving pods when the plan and
        the cluster allow it), re-reading on conflicts."""
        namespace, name, target = decision.namespace, decision.name, decision.target
        job = self._jobs.get((namespace, name))
        # the cluster that names the leaving trainers, when this shrink has victims to name
        naming = (self.cluster if isinstance(self.cluster, VictimScaling)
                  and target < decision.parallelism
                  and bool(decision.victim_nodes or decision.victims) else None)
        for _ in range(CONFLICT_RETRIES):
            try:
                trainer = await self.cluster.get_trainer_job_by_name(
                    namespace, trainer_job_name(name)
                )
                trainer["spec"]["parallelism"] = target
                if decision.batch is not None:  # the job's runtime applies it (no resize)
                    annotations = trainer["metadata"].setdefault("annotations", {})
                    annotations[ANNOTATION_BATCH_SIZE] = str(int(decision.batch))
                if target > decision.parallelism and decision.placement:
                    # the plan's nodes for the new trainers: their preferred nodes
                    annotate(trainer, decision.placement[-(target - decision.parallelism):],
                             target, asyncio.get_running_loop().time())
                if naming is not None and job is not None:
                    pods = await naming.trainer_pods(job)
                    victims = pick_victims(
                        pods, target, decision.victim_nodes, decision.victims
                    )
                    if victims:
                        await naming.scale_trainer_job(trainer, victims)
                        return
                await self.cluster.update_trainer_job(trainer)
                return
            except ConflictError:
                continue
            except NotFoundError:
                return  # the job went away; nothing to scale
        log.warning("scaling %s/%s gave up after %d conflicts", namespace, name, CONFLICT_RETRIES)


def _capped(max_instance: int, min_instance: int, cap: int | None) -> int:
    """A job's max-instance within what Kueue can admit for it (never below its min)."""
    if cap is None:
        return max_instance
    return max(min(max_instance, cap), min_instance)
