"""A scenario in real time on the real control plane, sampled as `edl simulate` samples it.

`edl simulate` runs the Controller and Autoscaler on the in-process model of the
Kubernetes controllers, scheduler and kubelets. Here the same scenario runs against
kube-apiserver, kube-controller-manager, kube-scheduler and kwok (`ControlPlane`), with
`edl controller` as a process, so the two timelines can be compared
(tests/e2e/test_fidelity.py, bench/fidelity_real.py, docs/fidelity.md):

* the cluster is the scenario's: its nodes (one node group), its background pods;
* kwok's stages play the scenario's latencies: bind -> Running uniform in
  `pod_start_latency_s`, deletion -> removal after `termination_s` of the pod's role;
* the submitted objects are the simulator's own (`training_job_manifest`,
  `deployment_manifest`, `background_pod_manifests`), at the scenario's times;
* the controller runs the scenario's policy interval and max load;
* every `sample_interval_s` the cluster is listed and recorded by the simulator's
  `Recorder` into a `Timeline`, so every metric and plot of `edl.sim` applies.

What the real path cannot replay is refused up front (`UnsupportedScenario`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.control_plane import ControlPlane, PlaneConfig
from e2e.helpers import SYSTEM_NAMESPACE, Controller, install_edl, start_controller_process
from e2e.rest import Rest
from edl.accounting.request import pod_request
from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER
from edl.api.quantity import cpu_milli
from edl.cluster.inproc.sampling import ClusterSample, ReplicaCounts, TrainerCounts
from edl.sim.jobs import training_job_manifest
from edl.sim.runner import Recorder, background_pod_manifests, deployment_manifest
from edl.sim.scenario import JobPlan, Scenario, Workload, expand_jobs
from edl.sim.timeline import Timeline
from polling import wait_until

ROLES = ("master", "pserver", "trainer")


class UnsupportedScenario(ValueError):
    """The scenario uses something the real-time runner does not replay."""


def plane_config(scenario: Scenario) -> PlaneConfig:
    """The fake cluster and kwok latencies of `scenario` (UnsupportedScenario if it has
    more than one node group, GPUs, binpack placement, jobs with work or a start count)."""
    problems = []
    groups = scenario.cluster.node_groups
    if len(groups) != 1:
        problems.append("cluster.node_groups: exactly one group")
    if scenario.placement != "spread":
        problems.append("placement: spread (kube-scheduler runs its default profile here)")
    if any(g.allocatable.gpu for g in groups):
        problems.append("cluster.node_groups: no GPUs (kwok nodes here have none)")
    for plan in expand_jobs(scenario):
        if plan.work is not None or plan.start_trainers is not None:
            problems.append(f"training.jobs: {plan.name}: no work and no start count")
    if problems:
        raise UnsupportedScenario(f"{scenario.name}: " + "; ".join(problems))
    group = groups[0]
    latency, stop = scenario.pod_start_latency_s, scenario.termination_s
    return PlaneConfig(
        nodes=group.count, node_cpu=str(group.allocatable.cpu),
        node_memory=str(group.allocatable.memory),
        pod_start_ms=0, pod_ready_ms=round(latency.min * 1000),
        pod_ready_jitter_ms=round(latency.max * 1000),
        pod_stop_ms=round(stop.other * 1000),
        role_stop_ms=tuple((role, round(getattr(stop, role) * 1000)) for role in ROLES),
        crash_jobs=())


def _key(namespace: str, name: str) -> str:
    return name if namespace == "default" else f"{namespace}/{name}"


def _cpu_total(rest: Rest) -> int:
    return sum(cpu_milli(node["status"]["allocatable"]["cpu"]) for node in rest.list("Node"))


def start_latencies(pods: list[dict[str, Any]]) -> dict[str, float]:
    """uid -> seconds from binding (PodScheduled) to Running (startTime) of the Running pods
    the scheduler bound (the API's timestamps have whole seconds)."""
    out = {}
    for pod in pods:
        status = pod.get("status") or {}
        started = status.get("startTime")
        scheduled = [c["lastTransitionTime"] for c in status.get("conditions") or []
                     if c.get("type") == "PodScheduled" and c.get("status") == "True"]
        if status.get("phase") == "Running" and started and scheduled:
            out[pod["metadata"]["uid"]] = (_timestamp(started)
                                           - _timestamp(scheduled[0]))
    return out


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cluster_sample(pods: list[dict[str, Any]], rest: Rest, when: float, cpu_total: int,
                   seen: set[str]) -> ClusterSample:
    """The cluster now, in the simulator's terms: trainers Running and not terminating per
    TrainingJob, replicas per Deployment, CPU requests of every Running pod. `seen`
    collects the jobs that have had a pod (the simulator's `first_pod_at`)."""
    running_cpu = requested_cpu = running_pods = live_pods = unbound = 0
    trainers: dict[str, int] = {}
    replicas: dict[tuple[str, str], int] = {}
    for pod in pods:
        meta, phase = pod["metadata"], pod.get("status", {}).get("phase")
        labels = meta.get("labels") or {}
        namespace = meta["namespace"]
        if phase in ("Succeeded", "Failed"):
            continue
        cpu = pod_request(pod).cpu_request_milli
        requested_cpu += cpu
        live_pods += 1
        unbound += not pod["spec"].get("nodeName")
        if phase == "Running":
            running_cpu += cpu
            running_pods += 1
        job = labels.get(LABEL_JOB)
        if job:
            seen.add(_key(namespace, job))
        live = phase == "Running" and not meta.get("deletionTimestamp")
        if live and job and labels.get(LABEL_ROLE) == ROLE_TRAINER:
            trainers[_key(namespace, job)] = trainers.get(_key(namespace, job), 0) + 1
        if live and "app" in labels:
            replicas[(namespace, labels["app"])] = replicas.get((namespace, labels["app"]), 0) + 1
    parallelism = {_key(j["metadata"]["namespace"], j["metadata"]["name"]):
                   j["spec"].get("parallelism") or 0
                   for j in rest.call("GET", "/apis/batch/v1/jobs")["items"]}
    jobs = {}
    for tj in rest.list("TrainingJob"):
        key = _key(tj["metadata"]["namespace"], tj["metadata"]["name"])
        jobs[key] = TrainerCounts(
            desired=parallelism.get(f"{key}-trainer", 0), running=trainers.get(key, 0),
            pending=0, terminating=0, first_pod_at=when if key in seen else None,
            first_running_at=None)
    deployments = {}
    for deployment in rest.list("Deployment"):
        meta = deployment["metadata"]
        deployments[_key(meta["namespace"], meta["name"])] = ReplicaCounts(
            desired=deployment["spec"].get("replicas") or 0,
            running=replicas.get((meta["namespace"], meta["name"]), 0), pending=0,
            terminating=0)
    return ClusterSample(time=when, cpu_total_milli=cpu_total,
                         running_cpu_request_milli=running_cpu,
                         requested_cpu_milli=requested_cpu, running_pods=running_pods,
                         pending_pods=live_pods - running_pods, unbound_pods=unbound, trainers=jobs,
                         deployments=deployments)


def pods_csv(samples: list[ClusterSample]) -> str:
    """Per sample: unbound, pending and running pods, CPU requested by non-terminal pods."""
    rows = ["t_s,unbound_pods,pending_pods,running_pods,requested_cpu_milli"]
    rows += [f"{s.time:g},{s.unbound_pods},{s.pending_pods},{s.running_pods},"
             f"{s.requested_cpu_milli}" for s in samples]
    return "\n".join(rows) + "\n"


@dataclass
class RealRun:
    """One run of `scenario` on `plane` (started with `plane_config(scenario)`)."""

    plane: ControlPlane
    scenario: Scenario
    log_dir: Path
    policy: str = "default"
    controller_args: tuple[str, ...] = ()  # more `edl controller` options (e.g. -v)
    rest: Rest = field(init=False)
    late_s: float = 0.0  # how far behind its grid point the latest sample was taken, at most
    # pod uid -> seconds from PodScheduled to startTime (kwok's Running), whole seconds
    start_latency_s: dict[str, float] = field(default_factory=dict)
    samples: list[ClusterSample] = field(default_factory=list)  # what was recorded, in full
    timeline: Timeline = field(default_factory=Timeline)

    def __post_init__(self) -> None:
        self.rest = Rest(self.plane)
        self.plans = expand_jobs(self.scenario)

    # -- set-up ------------------------------------------------------------------------
    def _namespaces(self) -> None:
        wanted = {plan.namespace for plan in self.plans}
        wanted |= {w.namespace for w in self.scenario.workloads}
        wanted |= {g.namespace for g in self.scenario.cluster.background_pods}
        for name in sorted(wanted):
            if self.rest.find("Namespace", name) is None:
                self.rest.create({"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": name}})
            wait_until(lambda name=name: self.rest.find("ServiceAccount", "default", name),
                       60, f"the default ServiceAccount of {name}")

    def _background(self) -> None:
        nodes = sorted(n["metadata"]["name"] for n in self.rest.list("Node"))
        names = []
        for pod in background_pod_manifests(self.scenario, nodes):
            self.rest.create(pod)
            names.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))

        def all_running() -> bool:
            phases = {(p["metadata"]["namespace"], p["metadata"]["name"]):
                      p.get("status", {}).get("phase") for p in self.rest.list("Pod")}
            return all(phases.get(key) == "Running" for key in names)
        wait_until(all_running, 120, "the background pods Running")

    def start_controller(self) -> Controller:
        kubeconfig = self.plane.service_account_kubeconfig(
            SYSTEM_NAMESPACE, "edl-controller", self.log_dir / "edl-controller.kubeconfig")
        autoscaler = self.scenario.autoscaler
        controller = start_controller_process(
            kubeconfig, self.log_dir / "controller.log", "fidelity",
            f"--policy={self.policy}", f"--interval={autoscaler.interval_s:g}",
            f"--max-load={autoscaler.max_load_desired:g}", "--status-interval=1",
            f"--lease-namespace={SYSTEM_NAMESPACE}", *self.controller_args)

        def leading() -> bool:
            if controller.proc.poll() is not None:
                raise AssertionError(f"edl controller exited:\n{controller.text()[-2000:]}")
            lease = self.rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE)
            return bool(lease) and lease["spec"].get("holderIdentity") == "fidelity"
        wait_until(leading, 60, "edl controller holding the Lease")
        return controller

    # -- the schedule ------------------------------------------------------------------
    def events(self) -> list[tuple[float, Callable[[], None]]]:
        """(time, action) for every submission, deletion and replica change, in order."""
        image = self.scenario.training.image
        out: list[tuple[float, Callable[[], None]]] = []
        for plan in self.plans:
            out.append((plan.submit_at, lambda plan=plan: self._submit(plan, image)))
            if plan.delete_at is not None:
                out.append((plan.delete_at, lambda plan=plan: self.rest.delete(
                    "TrainingJob", plan.name, plan.namespace)))
        for workload in self.scenario.workloads:
            for index, step in enumerate(workload.schedule):
                out.append((step.at, lambda w=workload, r=step.replicas, first=index == 0:
                            self._scale(w, r, first)))
        return sorted(out, key=lambda event: event[0])

    def _submit(self, plan: JobPlan, image: str) -> None:
        self.rest.create(training_job_manifest(plan, image, elastic=True))

    def _scale(self, workload: Workload, replicas: int, first: bool) -> None:
        if first:
            self.rest.create(deployment_manifest(workload, replicas))
        else:
            self.rest.merge("Deployment", workload.name, {"spec": {"replicas": replicas}},
                            workload.namespace)

    # -- main --------------------------------------------------------------------------
    def run(self) -> Timeline:
        """Set up, start the controller, play the schedule in real time while sampling."""
        install_edl(self.rest)
        self._namespaces()
        self._background()
        controller = self.start_controller()
        try:
            return self._play()
        finally:
            controller.stop()

    def _play(self) -> Timeline:
        recorder = Recorder({_key(p.namespace, p.name): p.name for p in self.plans})
        cpu_total = _cpu_total(self.rest)
        seen: set[str] = set()
        events = self.events()
        interval = self.scenario.sample_interval_s
        steps = int(self.scenario.duration_s / interval + 1e-9)
        start = time.monotonic()
        for step in range(steps + 1):
            when = step * interval
            time.sleep(max(0.0, start + when - time.monotonic()))
            while events and events[0][0] <= when:
                events.pop(0)[1]()
            self.late_s = max(self.late_s, time.monotonic() - start - when)
            pods = self.rest.list("Pod")
            sample = cluster_sample(pods, self.rest, when, cpu_total, seen)
            recorder.record(when, sample)
            self.samples.append(sample)
            self.start_latency_s.update(start_latencies(pods))
        self.timeline = recorder.timeline
        return self.timeline

