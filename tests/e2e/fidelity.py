"""A scenario in real time on the real control plane, recorded as `edl simulate` samples it.

`edl simulate` runs the Controller and Autoscaler on the in-process model of the
Kubernetes controllers, scheduler and kubelets. Here the same scenario runs against
kube-apiserver, kube-controller-manager, kube-scheduler and kwok (`ControlPlane`), with
`edl controller` as a process, so the two timelines can be compared
(tests/e2e/test_fidelity.py, bench/fidelity_real.py, docs/fidelity.md):

* the cluster is the scenario's: its node groups become kwok nodes of the same names,
  allocatable (GPUs as `nvidia.com/gpu`), labels and taints; its background pods, its
  PriorityClasses and its namespaces' ResourceQuotas;
* kwok's stages play the scenario's latencies: bind -> Running uniform in
  `pod_start_latency_s`, deletion -> removal after `termination_s` of the pod's role;
* the submitted objects are the simulator's own (`training_job_manifest` with the job's
  `scheduling` as `spec.trainer` fields, `deployment_manifest`,
  `background_pod_manifests`), at the scenario's times;
* the controller runs the scenario's policy interval and max load;
* the cluster is recorded as a log of watch events (`WatchRecorder`) and replayed
  afterwards on the scenario's sample grid (`fidelity_replay`) into the simulator's
  `Recorder`, so every metric and plot of `edl.sim` applies and nothing has to keep
  time while the run is on (a loaded machine delays what is recorded by the watch's lag,
  not by a sampler's).

A scenario can be played faster (`edl.sim.timescale.scale_time`): pass the scaled one.
What the real path cannot replay is refused up front (`UnsupportedScenario`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.control_plane import ControlPlane, PlaneConfig
from e2e.fidelity_replay import key, replay, start_latencies
from e2e.helpers import (
    SERVED,
    SYSTEM_NAMESPACE,
    Controller,
    install_edl,
    served_namespace,
    start_controller_process,
)
from e2e.rest import Rest
from e2e.watch_record import Event, WatchRecorder
from edl.api.quantity import cpu_milli
from edl.cluster.inproc.sampling import ClusterSample
from edl.sim.jobs import training_job_manifest
from edl.sim.runner import Recorder, background_pod_manifests, deployment_manifest
from edl.sim.scenario import JobPlan, Scenario, Workload, expand_jobs
from edl.sim.timeline import Timeline
from polling import wait_until

ROLES = ("master", "pserver", "trainer")


class UnsupportedScenario(ValueError):
    """The scenario uses something the real-time runner does not replay."""


def plane_config(scenario: Scenario) -> PlaneConfig:
    """kwok's latencies for `scenario`, no nodes (the run adds its node groups)
    (UnsupportedScenario for binpack placement, jobs with work or a start count)."""
    problems = []
    if scenario.placement != "spread":
        problems.append("placement: spread (kube-scheduler runs its default profile here)")
    for plan in expand_jobs(scenario):
        if plan.work is not None or plan.start_trainers is not None:
            problems.append(f"training.jobs: {plan.name}: no work and no start count")
    if problems:
        raise UnsupportedScenario(f"{scenario.name}: " + "; ".join(problems))
    latency, stop = scenario.pod_start_latency_s, scenario.termination_s
    return PlaneConfig(
        nodes=0, pod_start_ms=0, pod_ready_ms=round(latency.min * 1000),
        pod_ready_jitter_ms=round(latency.max * 1000),
        pod_stop_ms=round(stop.other * 1000),
        role_stop_ms=tuple((role, round(getattr(stop, role) * 1000)) for role in ROLES),
        crash_jobs=(), config_error_jobs=())


def real_training_job(plan: JobPlan, image: str) -> dict[str, Any]:
    """The simulator's TrainingJob of `plan`, its trainers' scheduling fields (tolerations,
    nodeSelector, affinity, priorityClassName) in `spec.trainer` where a user writes them.
    (The simulator puts the same fields on the trainer Job's pod template directly:
    `InProcessCluster.set_pod_template_defaults`.)"""
    manifest = training_job_manifest(plan, image, elastic=True)
    if plan.group.scheduling is not None:
        manifest["spec"]["trainer"].update(plan.group.scheduling.pod_fields())
    return manifest


@dataclass
class RealRun:
    """One run of `scenario` on `plane` (started with `plane_config(scenario)`)."""

    plane: ControlPlane
    scenario: Scenario
    log_dir: Path
    policy: str = "default"
    controller_args: tuple[str, ...] = ()  # more `edl controller` options (e.g. -v)
    rest: Rest = field(init=False)
    late_s: float = 0.0  # how far behind its time the latest scheduled action was taken
    watch_lag_s: float = 0.0  # the recorder's lag (+ up to 1 s of timestamp rounding)
    # pod uid -> seconds from PodScheduled to startTime (kwok's Running), whole seconds
    start_latency_s: dict[str, float] = field(default_factory=dict)
    samples: list[ClusterSample] = field(default_factory=list)  # the replayed grid, in full
    events: list[Event] = field(default_factory=list)  # the watch log
    timeline: Timeline = field(default_factory=Timeline)

    def __post_init__(self) -> None:
        self.rest = Rest(self.plane)
        self.plans = expand_jobs(self.scenario)

    # -- set-up ------------------------------------------------------------------------
    def _nodes(self) -> None:
        for group in self.scenario.cluster.node_groups:
            allocatable = group.allocatable.to_resource_list()
            self.plane.add_nodes(group.count, prefix=group.name, allocatable=allocatable,
                                 labels=dict(group.labels),
                                 taints=[taint.to_dict() for taint in group.taints])

    def _namespaces(self) -> None:
        wanted = {plan.namespace for plan in self.plans}
        wanted |= {w.namespace for w in self.scenario.workloads}
        wanted |= {g.namespace for g in self.scenario.cluster.background_pods}
        wanted |= {q.namespace for q in self.scenario.quotas}
        for name in sorted(wanted):
            if self.rest.find("Namespace", name) is None:
                self.rest.create(served_namespace(name))
            else:
                self.rest.merge("Namespace", name, {"metadata": {"labels": SERVED}})
            wait_until(lambda name=name: self.rest.find("ServiceAccount", "default", name),
                       60, f"the default ServiceAccount of {name}")

    def _admission(self) -> None:
        """The scenario's PriorityClasses and ResourceQuotas; a quota is waited for until
        the quota controller has written its status (before that, admission refuses every
        pod of the namespace: "status unknown for quota")."""
        for priority in self.scenario.priority_classes:
            self.rest.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                              "metadata": {"name": priority.name}, "value": priority.value,
                              "globalDefault": priority.global_default})
        for quota in self.scenario.quotas:
            self.rest.create(quota.manifest())
            wait_until(lambda q=quota: (self.rest.get("ResourceQuota", q.name, q.namespace)
                                        .get("status") or {}).get("hard"),
                       60, f"ResourceQuota {quota.namespace}/{quota.name} status")

    def _background(self) -> None:
        nodes = sorted(n["metadata"]["name"] for n in self.rest.list("Node"))
        names = []
        for pod in background_pod_manifests(self.scenario, nodes):
            self.rest.create(pod)
            names.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))

        def all_running() -> bool:
            phases = {(p["metadata"]["namespace"], p["metadata"]["name"]):
                      p.get("status", {}).get("phase") for p in self.rest.list("Pod")}
            return all(phases.get(name) == "Running" for name in names)
        wait_until(all_running, 120, "the background pods Running")

    def start_controller(self) -> Controller:
        kubeconfig = self.plane.service_account_kubeconfig(
            SYSTEM_NAMESPACE, "edl-controller", self.log_dir / "edl-controller.kubeconfig")
        autoscaler = self.scenario.autoscaler
        controller = start_controller_process(
            kubeconfig, self.log_dir / "controller.log", "fidelity",
            f"--policy={self.policy}", f"--interval={autoscaler.interval_s:g}",
            f"--max-load={autoscaler.max_load_desired:g}", "--status-interval=1",
            f"--lease-namespace={SYSTEM_NAMESPACE}",
            # trainers get only the scenario's PriorityClasses, as in the simulator (edl
            # controller's default class would let kube-scheduler preempt them at once)
            "--trainer-priority-class=", *self.controller_args)

        def leading() -> bool:
            if controller.proc.poll() is not None:
                raise AssertionError(f"edl controller exited:\n{controller.text()[-2000:]}")
            lease = self.rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE)
            return bool(lease) and lease["spec"].get("holderIdentity") == "fidelity"
        wait_until(leading, 60, "edl controller holding the Lease")
        return controller

    # -- the schedule ------------------------------------------------------------------
    def actions(self) -> list[tuple[float, Callable[[], None]]]:
        """(time, action) for every submission, deletion and replica change, in order."""
        image = self.scenario.training.image
        out: list[tuple[float, Callable[[], None]]] = []
        for plan in self.plans:
            out.append((plan.submit_at, lambda plan=plan: self.rest.create(
                real_training_job(plan, image))))
            if plan.delete_at is not None:
                out.append((plan.delete_at, lambda plan=plan: self.rest.delete(
                    "TrainingJob", plan.name, plan.namespace)))
        for workload in self.scenario.workloads:
            for index, step in enumerate(workload.schedule):
                out.append((step.at, lambda w=workload, r=step.replicas, first=index == 0:
                            self._scale(w, r, first)))
        return sorted(out, key=lambda action: action[0])

    def _scale(self, workload: Workload, replicas: int, first: bool) -> None:
        if first:
            self.rest.create(deployment_manifest(workload, replicas))
        else:
            self.rest.merge("Deployment", workload.name, {"spec": {"replicas": replicas}},
                            workload.namespace)

    # -- main --------------------------------------------------------------------------
    def run(self) -> Timeline:
        """Set up, start the controller, play the schedule in real time while recording."""
        install_edl(self.rest)
        self._nodes()
        self._namespaces()
        self._admission()
        self._background()
        controller = self.start_controller()
        recorder = WatchRecorder(self.plane)
        recorder.start()
        try:
            start = self._play()
        finally:
            recorder.stop()
            controller.stop()
        self.events = recorder.events()
        self.watch_lag_s = recorder.lag_s
        self._rebuild(start)
        return self.timeline

    def _play(self) -> float:
        """Every action at its time; the monotonic time of t = 0."""
        actions = self.actions()
        start = time.monotonic()
        for when, action in actions:
            time.sleep(max(0.0, start + when - time.monotonic()))
            self.late_s = max(self.late_s, time.monotonic() - start - when)
            action()
        time.sleep(max(0.0, start + self.scenario.duration_s - time.monotonic()))
        return start

    def _rebuild(self, start: float) -> None:
        interval = self.scenario.sample_interval_s
        steps = int(self.scenario.duration_s / interval + 1e-9)
        grid = [step * interval for step in range(steps + 1)]
        cpu_total = sum(cpu_milli(n["status"]["allocatable"]["cpu"])
                        for n in self.rest.list("Node"))
        self.samples = replay(self.events, start, grid, cpu_total)
        recorder = Recorder({key(p.namespace, p.name): p.name for p in self.plans})
        for sample in self.samples:
            recorder.record(sample.time, sample)
        self.timeline = recorder.timeline
        self.start_latency_s = start_latencies(self.events)
