"""Run a scenario on virtual time: the real Controller and Autoscaler on the in-process cluster.

The run is an asyncio program on a `VirtualClock` loop, so nothing here (or in
the Controller/Autoscaler) knows time is virtual. The scenario's schedule becomes
timers; a sampler records the cluster every ``sample_interval_s`` into a
`Timeline`, just after every event of that instant has been handled (samples sit
``SAMPLE_OFFSET_S`` after the grid point), so a change at t = 115 s shows in the
sample of 115 s. Everything random comes from one seeded `random.Random`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from edl.api.names import trainer_job_name
from edl.cluster.inproc.clock import VirtualClock
from edl.cluster.inproc.cluster import ClusterSample, InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner, Uniform
from edl.cluster.port import ConflictError, NotFoundError
from edl.control.loops import ControlLoops
from edl.jobparser import JobParser
from edl.policy import Policy
from edl.sim.jobs import training_job_manifest
from edl.sim.metrics import Metrics, compute_metrics
from edl.sim.pools import job_mins, job_overlaps, node_pools, pool_allocatable
from edl.sim.scenario import JobPlan, Scenario, Workload, expand_jobs
from edl.sim.sections import BackgroundPods
from edl.sim.timeline import JobSeries, Timeline, WorkloadSeries
from edl.sim.work import SimulatedTraining
from edl.throughput.board import ThroughputBoard

SAMPLE_OFFSET_S = 1e-6
STATIC = "static"
Progress = Callable[[float], None]


@dataclass(frozen=True)
class RunResult:
    policy: str
    timeline: Timeline
    metrics: Metrics


def _pod_template(
    labels: dict[str, str], name: str, requirements: dict[str, Any], image: str,
    scheduling: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": name, "image": image, "resources": requirements}],
                 **(scheduling or {})},
    }


def deployment_manifest(workload: Workload, replicas: int) -> dict[str, Any]:
    """The apps/v1 Deployment of another workload at ``replicas``."""
    labels = {"app": workload.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload.name, "namespace": workload.namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": _pod_template(
                labels, workload.name, workload.resources.to_requirements(), workload.name,
                workload.scheduling.pod_fields() if workload.scheduling else None,
            ),
        },
    }


def background_pod_manifest(
    group: BackgroundPods, index: int, requirements: dict[str, Any], node: str | None
) -> dict[str, Any]:
    """Pod ``index`` of a background group, bound to ``node`` when the group is per node."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group.name}-{index}", "namespace": group.namespace},
        "spec": {"containers": [
            {"name": group.name, "image": group.name, "resources": requirements}
        ]},
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def background_pod_manifests(
    scenario: Scenario, nodes: list[str]
) -> list[dict[str, Any]]:
    """Every background pod of the scenario; a per-node group's pod i bound to nodes[i]."""
    pods = []
    for group in scenario.cluster.background_pods:
        requirements = group.resources.to_requirements()
        count = len(nodes) if group.per_node else group.count or 0
        for index in range(count):
            node = nodes[index] if group.per_node else None
            pods.append(background_pod_manifest(group, index, requirements, node))
    return pods


class Recorder:
    """Appends `ClusterSample`s to a `Timeline`, aligning series that appear or vanish
    (also fed from a real cluster by tests/e2e/fidelity.py: both sides sampled alike)."""

    def __init__(
        self, job_keys: dict[str, str], pools: Mapping[str, str] | None = None,
        pool_allocatable: Mapping[str, int] | None = None,
    ) -> None:
        self.timeline = Timeline()
        self._job_keys = job_keys  # sample key -> job name
        self._pools = dict(pools or {})  # node -> its pool (node group)
        if pool_allocatable:
            self.timeline.cpu_allocatable_by_pool = dict(pool_allocatable)
            self.timeline.cpu_running_by_pool = {name: [] for name in pool_allocatable}

    def record(self, when: float, sample: ClusterSample) -> None:
        timeline = self.timeline
        rows = len(timeline.times)
        timeline.times.append(when)
        timeline.cpu_running_milli.append(sample.running_cpu_request_milli)
        timeline.cpu_allocatable_milli.append(sample.cpu_total_milli)
        if timeline.cpu_running_by_pool:
            per_pool = dict.fromkeys(timeline.cpu_running_by_pool, 0)
            for node, milli in sample.running_cpu_by_node.items():
                pool = self._pools.get(node)
                if pool in per_pool:
                    per_pool[pool] += milli
            for pool, milli in per_pool.items():
                timeline.cpu_running_by_pool[pool].append(milli)
        for key, counts in sample.trainers.items():
            name = self._job_keys.get(key, key)
            series = timeline.jobs.get(name)
            if series is None:
                series = timeline.jobs[name] = JobSeries(
                    [False] * rows, [False] * rows, [0] * rows, [0] * rows
                )
            series.present.append(True)
            series.pods_created.append(counts.first_pod_at is not None)
            series.trainers_running.append(counts.running)
            series.trainers_desired.append(counts.desired)
        for series in timeline.jobs.values():
            if len(series.present) == rows:  # deleted: gone from the sample
                series.present.append(False)
                series.pods_created.append(series.pods_created[-1] if rows else False)
                series.trainers_running.append(0)
                series.trainers_desired.append(0)
        for key, replicas in sample.deployments.items():
            workload = timeline.workloads.get(key)
            if workload is None:
                workload = timeline.workloads[key] = WorkloadSeries([0] * rows, [0] * rows)
            workload.desired.append(replicas.desired)
            workload.running.append(replicas.running)
        for workload in timeline.workloads.values():
            if len(workload.desired) == rows:
                workload.desired.append(0)
                workload.running.append(0)


class _Run:
    """One scenario under one policy."""

    def __init__(
        self, scenario: Scenario, policy: str, seed: int, managed: bool = True,
        planner: Policy | None = None,
    ) -> None:
        self.scenario = scenario
        self.managed = managed
        self.policy = policy
        self.planner = planner
        self.elastic = policy != STATIC
        warmup = scenario.pod_start_latency_s.max + 1.0
        # Background pods start before t = 0 so they are Running when sampling begins.
        self.clock = VirtualClock(start=-warmup)
        latency = scenario.pod_start_latency_s
        termination = scenario.termination_s
        pod_runner = SimulatedPodRunner(
            self.clock,
            random.Random(seed),
            start_latency=Uniform(latency.min, latency.max),
            termination={
                "trainer": Fixed(termination.trainer),
                "pserver": Fixed(termination.pserver),
                "master": Fixed(termination.master),
            },
            other_termination=Fixed(termination.other),
        )
        self.cluster = InProcessCluster(
            self.clock, pod_runner, placement=scenario.placement, seed=seed
        )
        for group in scenario.cluster.node_groups:
            allocatable = group.allocatable.to_resource_list()
            taints = [taint.to_dict() for taint in group.taints]
            for index in range(group.count):
                self.cluster.add_node(f"{group.name}-{index}", allocatable, group.labels, taints)
        for priority_class in scenario.priority_classes:
            self.cluster.create_priority_class(
                priority_class.name, priority_class.value, priority_class.global_default)
        for quota in scenario.quotas:
            self.cluster.create_resource_quota(quota.manifest())
        if scenario.kueue is not None:
            scenario.kueue.apply(self.cluster)
        self.plans = expand_jobs(scenario)
        keys = {
            plan.name if plan.namespace == "default" else f"{plan.namespace}/{plan.name}": plan.name
            for plan in self.plans
        }
        self.recorder = Recorder(keys, node_pools(scenario), pool_allocatable(scenario))
        self.board = ThroughputBoard()
        # its own random stream: scenarios without work draw exactly what they drew before
        self.training = SimulatedTraining(
            self.cluster, pod_runner, self.clock, self.board, random.Random(f"work-{seed}"),
            self.plans,
        )
        self._starting: set[tuple[str, str]] = set()  # the start count is not a resize
        self._start_trainers = {
            (plan.namespace, trainer_job_name(plan.name)): plan.start_trainers
            for plan in self.plans
            if self.elastic and plan.start_trainers is not None
        }

    # -- schedule ---------------------------------------------------------------------
    def _background(self) -> None:
        for pod in background_pod_manifests(self.scenario, self.cluster.node_names()):
            self.cluster.create_pod(pod)

    def _submit(self, plan: JobPlan) -> None:
        image = self.scenario.training.image
        if plan.group.scheduling is not None:
            # the trainers' scheduling fields, set on the trainer Job's pod template
            self.cluster.set_pod_template_defaults(
                plan.namespace, trainer_job_name(plan.name), plan.group.scheduling.pod_fields())
        self.cluster.create_training_job(training_job_manifest(plan, image, elastic=self.elastic))
        self.training.submitted(plan)
        if plan.work is not None:
            self.recorder.timeline.work_submitted[plan.name] = self.clock.now()

    def _delete(self, plan: JobPlan) -> None:
        self.training.deleted(plan)
        with contextlib.suppress(NotFoundError):  # never submitted within the run
            self.cluster.delete_training_job(plan.namespace, plan.name)

    def _scale_workload(self, workload: Workload, replicas: int, first: bool) -> None:
        if first:
            self.cluster.create_deployment(deployment_manifest(workload, replicas))
        else:
            self.cluster.scale_deployment(workload.namespace, workload.name, replicas)

    def _on_job_event(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Start a new trainer Job at the scenario's ``start`` count (user-chosen initial size);
        count every later change of its parallelism (a resize by the autoscaler)."""
        if event == "MODIFIED" and old is not None:
            before = old["spec"].get("parallelism")
            after = obj["spec"].get("parallelism")
            metadata = obj["metadata"]
            job = metadata["name"].removesuffix("-trainer")
            if before != after and job in self.recorder.timeline.work_submitted:
                if (metadata["namespace"], metadata["name"]) in self._starting:
                    self._starting.discard((metadata["namespace"], metadata["name"]))
                else:
                    resizes = self.recorder.timeline.work_resizes
                    resizes[job] = resizes.get(job, 0) + 1
            return
        if event != "ADDED":
            return
        metadata = obj["metadata"]
        start = self._start_trainers.pop((metadata["namespace"], metadata["name"]), None)
        if start is not None and start != obj["spec"].get("parallelism"):
            loop = self.clock.loop
            self._starting.add((metadata["namespace"], metadata["name"]))
            loop.call_soon(self._set_parallelism, metadata["namespace"], metadata["name"], start)

    def _set_parallelism(self, namespace: str, name: str, count: int) -> None:
        with contextlib.suppress(NotFoundError, ConflictError):  # gone, or scaled already
            self.cluster.scale("Job", namespace, name, count)

    def _schedule(self) -> None:
        clock = self.clock
        for plan in self.plans:
            clock.call_at(plan.submit_at, self._submit, plan)
            if plan.delete_at is not None:
                clock.call_at(plan.delete_at, self._delete, plan)
        for workload in self.scenario.workloads:
            for index, step in enumerate(workload.schedule):
                clock.call_at(step.at, self._scale_workload, workload, step.replicas, index == 0)

    # -- main -------------------------------------------------------------------------
    async def main(self, progress: Progress | None) -> Timeline:
        self._background()
        self.cluster.store.listen("Job", self._on_job_event)
        loops = ControlLoops.new(
            self.cluster,
            self.scenario.autoscaler.max_load_desired if self.elastic else None,
            policy=self.planner if self.planner is not None else self.policy,
            interval=self.scenario.autoscaler.interval_s,
            throughput=self.board,
            parser=JobParser(managed_trainers=self.managed),
        )
        loops.start()
        self._schedule()
        interval = self.scenario.sample_interval_s
        steps = int(self.scenario.duration_s / interval + 1e-9)
        try:
            for step in range(steps + 1):
                when = step * interval
                await asyncio.sleep(when + SAMPLE_OFFSET_S - self.clock.now())
                self.recorder.record(when, self.cluster.sample())
                if progress is not None:
                    progress(when)
        finally:
            await loops.stop()
        self.recorder.timeline.work_finished.update(self.training.completions)
        return self.recorder.timeline


TRAINER_WORKLOADS = ("managed", "job")


def run_policy(
    scenario: Scenario, policy: str, seed: int | None = None, progress: Progress | None = None,
    *, trainer_workload: str = "managed", planner: Policy | None = None,
) -> RunResult:
    """Run ``scenario`` under one policy (``default``, ``reference`` or ``static``).

    ``planner``: a policy object to plan with instead of the named one (benchmarks
    compare variants of a policy this way; ``policy`` then only names the run).

    ``trainer_workload``: ``managed`` (edl's controller runs the trainer pods) or ``job``
    (the cluster's Job controller does: the design before issue 10, for comparisons).
    """
    if trainer_workload not in TRAINER_WORKLOADS:
        raise ValueError(f"trainer_workload must be one of {TRAINER_WORKLOADS}")
    seed = scenario.seed if seed is None else seed
    run = _Run(scenario, policy, seed, managed=trainer_workload == "managed", planner=planner)
    try:
        timeline = run.clock.run(run.main(progress))
    finally:
        run.clock.close()
    measure = scenario.measure
    metrics = compute_metrics(
        timeline,
        policy=policy,
        scenario=scenario.name,
        utilization_until_s=measure.utilization_until_s,
        steady_start_s=measure.steady_state.start,
        steady_end_s=measure.steady_state.end,
        mins=job_mins(scenario),
        overlaps=job_overlaps(scenario),
    )
    return RunResult(policy, timeline, metrics)


def simulate(
    scenario: Scenario, policies: list[str], seed: int | None = None, progress: bool = False
) -> list[RunResult]:
    """Run every policy in turn; ``progress`` shows a rich bar over virtual time."""
    if not progress:
        return [run_policy(scenario, policy, seed) for policy in policies]
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:>5.0f}/{task.total:.0f} s virtual"),
        TimeElapsedColumn(),
    )
    results = []
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        for policy in policies:
            task = bar.add_task(f"{scenario.name} [{policy}]", total=scenario.duration_s)
            results.append(
                run_policy(
                    scenario, policy, seed,
                    functools.partial(_advance, bar, task),
                )
            )
    return results


def _advance(bar: Any, task: Any, when: float) -> None:
    """Move a rich progress bar's task to virtual time `when`."""
    bar.update(task, completed=when)
