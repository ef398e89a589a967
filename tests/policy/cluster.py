"""A tiny deterministic cluster for policy tests: nodes, placed pods, a first-fit scheduler.

Not a simulator of Kubernetes (that is edl.sim); just enough to turn a plan into
the next state so tests can check what plans do over a few ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edl.accounting import ClusterResource, NodeCapacity, PodResources, ResourceLedger
from edl.policy import Decision, JobView, Trainer


@dataclass
class Job:
    namespace: str
    name: str
    min_instance: int
    max_instance: int
    parallelism: int
    cpu: int = 1000
    memory: int = 1000
    gpu: int = 0


@dataclass
class Pod:
    name: str
    resources: PodResources
    job: str | None = None  # trainer of this job
    node: str = ""


@dataclass
class Cluster:
    nodes: dict[str, NodeCapacity] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    serial: int = 0

    def add_node(self, name: str, cpu: int, memory: int, gpu: int = 0) -> None:
        self.nodes[name] = NodeCapacity(cpu, memory, gpu)

    def add_pod(self, resources: PodResources, job: str | None = None) -> Pod:
        self.serial += 1
        pod = Pod(f"pod-{self.serial}", resources, job)
        self.pods.append(pod)
        return pod

    def add_job(self, job: Job) -> None:
        self.jobs[job.name] = job
        self.reconcile()

    def trainer_resources(self, job: Job) -> PodResources:
        return PodResources(job.cpu, job.cpu, job.memory, job.memory, job.gpu, job.gpu)

    def reconcile(self) -> None:
        """Job controller: pods follow parallelism (pending removed first, then newest)."""
        for job in self.jobs.values():
            mine = [p for p in self.pods if p.job == job.name]
            while len(mine) < job.parallelism:
                mine.append(self.add_pod(self.trainer_resources(job), job.name))
            surplus = len(mine) - job.parallelism
            if surplus > 0:
                victims = sorted(mine, key=lambda p: (p.node != "", -int(p.name[4:])))[:surplus]
                for pod in victims:
                    self.pods.remove(pod)

    def used(self, node: str) -> tuple[int, int, int]:
        on = [p.resources for p in self.pods if p.node == node]
        return (
            sum(r.cpu_request_milli for r in on),
            sum(r.memory_request_mega for r in on),
            sum(r.gpu_request for r in on),
        )

    def schedule(self) -> None:
        """First-fit every unbound pod (non-trainers first, in creation order)."""
        for pod in sorted(self.pods, key=lambda p: (p.job is not None, int(p.name[4:]))):
            if pod.node:
                continue
            r = pod.resources
            for name, cap in self.nodes.items():
                cpu, memory, gpu = self.used(name)
                if (
                    cap.cpu_milli - cpu >= r.cpu_request_milli
                    and cap.memory_mega - memory >= r.memory_request_mega
                    and cap.gpu - gpu >= r.gpu_request
                ):
                    pod.node = name
                    break

    def resources(self) -> ClusterResource:
        ledger = ResourceLedger()
        for name, cap in self.nodes.items():
            ledger.set_node(name, cap)
        for pod in self.pods:
            ledger.set_pod_resources(
                "ns", pod.name, pod.resources, node=pod.node, trainer=pod.job is not None
            )
        return ledger.snapshot()

    def views(self) -> list[JobView]:
        views = []
        for job in self.jobs.values():
            mine = [p for p in self.pods if p.job == job.name]
            running = sum(1 for p in mine if p.node)
            views.append(
                JobView(
                    "ns",
                    job.name,
                    job.min_instance,
                    job.max_instance,
                    job.parallelism,
                    cpu_request_milli=job.cpu,
                    cpu_limit_milli=job.cpu,
                    memory_request_mega=job.memory,
                    memory_limit_mega=job.memory,
                    gpu_request=job.gpu,
                    gpu_limit=job.gpu,
                    total=len(mine),
                    running=running,
                    pending=len(mine) - running,
                    unscheduled=len(mine) - running,
                    trainers=tuple(Trainer(p.name, p.node) for p in mine),
                )
            )
        return views

    def apply(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            self.jobs[decision.name].parallelism = decision.target
            if decision.victims:  # the named pods leave (as the Autoscaler deletes them)
                self.pods = [p for p in self.pods if p.name not in decision.victims]
        self.reconcile()
        self.schedule()

    def running(self) -> dict[str, int]:
        return {name: sum(1 for p in self.pods if p.job == name and p.node) for name in self.jobs}

    def overcommitted(self) -> list[str]:
        bad = []
        for name, cap in self.nodes.items():
            cpu, memory, gpu = self.used(name)
            if cpu > cap.cpu_milli or memory > cap.memory_mega or gpu > cap.gpu:
                bad.append(name)
        return bad
