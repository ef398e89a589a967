"""Rebuild a real run's timeline from its watch log (pure; tests/e2e/watch_record.py logs).

The cluster's objects are replayed event by event; at each grid point the state holds
every event that arrived at or before it, and is summarised as the simulator summarises
its own cluster (`ClusterSample`): trainers Running and not terminating per TrainingJob,
replicas per Deployment, CPU requests of Running pods. The grid is chosen afterwards, so
the recording never has to keep time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from e2e.watch_record import Event, timestamp
from edl.accounting.request import pod_request
from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER
from edl.cluster.inproc.sampling import ClusterSample, ReplicaCounts, TrainerCounts


def key(namespace: str, name: str) -> str:
    """The simulator's key of an object: its name, `namespace/name` outside default."""
    return name if namespace == "default" else f"{namespace}/{name}"


def _object_key(kind: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return meta["uid"] if kind == "Pod" else key(meta.get("namespace", ""), meta["name"])


@dataclass
class ClusterState:
    """The objects of each kind as the watch has told of them so far."""

    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    seen_jobs: set[str] = field(default_factory=set)  # jobs that have had a pod

    def apply(self, event: Event) -> None:
        store = self.objects.setdefault(event.kind, {})
        if event.type == "RESYNC":
            store.clear()
            items = event.obj
        elif event.type == "DELETED":
            store.pop(_object_key(event.kind, event.obj), None)
            return
        else:
            items = [event.obj]
        for obj in items:
            store[_object_key(event.kind, obj)] = obj
            if event.kind == "Pod":
                labels = obj["metadata"].get("labels") or {}
                if labels.get(LABEL_JOB):
                    self.seen_jobs.add(key(obj["metadata"]["namespace"], labels[LABEL_JOB]))

    def of(self, kind: str) -> Iterable[dict[str, Any]]:
        return self.objects.get(kind, {}).values()

    def sample(self, when: float, cpu_total: int) -> ClusterSample:
        """The cluster now, in the simulator's terms."""
        running_cpu = requested_cpu = running_pods = live_pods = unbound = 0
        trainers: dict[str, int] = {}
        replicas: dict[str, int] = {}
        for pod in self.of("Pod"):
            meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            labels = meta.get("labels") or {}
            cpu = pod_request(pod).cpu_request_milli
            requested_cpu += cpu
            live_pods += 1
            unbound += not pod["spec"].get("nodeName")
            if phase == "Running":
                running_cpu += cpu
                running_pods += 1
            if phase != "Running" or meta.get("deletionTimestamp"):
                continue
            job = labels.get(LABEL_JOB)
            if job and labels.get(LABEL_ROLE) == ROLE_TRAINER:
                name = key(meta["namespace"], job)
                trainers[name] = trainers.get(name, 0) + 1
            if "app" in labels:
                name = key(meta["namespace"], labels["app"])
                replicas[name] = replicas.get(name, 0) + 1
        parallelism = {name: job["spec"].get("parallelism") or 0
                       for name, job in self.objects.get("Job", {}).items()}
        jobs = {name: TrainerCounts(
            desired=parallelism.get(f"{name}-trainer", 0), running=trainers.get(name, 0),
            pending=0, terminating=0, first_pod_at=when if name in self.seen_jobs else None,
            first_running_at=None) for name in self.objects.get("TrainingJob", {})}
        deployments = {name: ReplicaCounts(
            desired=d["spec"].get("replicas") or 0, running=replicas.get(name, 0), pending=0,
            terminating=0) for name, d in self.objects.get("Deployment", {}).items()}
        return ClusterSample(time=when, cpu_total_milli=cpu_total,
                             running_cpu_request_milli=running_cpu,
                             requested_cpu_milli=requested_cpu, running_pods=running_pods,
                             pending_pods=live_pods - running_pods, unbound_pods=unbound,
                             trainers=jobs, deployments=deployments)


def replay(events: list[Event], start: float, grid: list[float],
           cpu_total: int) -> list[ClusterSample]:
    """One sample per grid point (seconds after `start`, the monotonic time of t = 0),
    each holding every event that arrived at or before it."""
    state = ClusterState()
    out = []
    pending = iter(sorted(events, key=lambda event: event.at))
    upcoming = next(pending, None)
    for when in grid:
        while upcoming is not None and upcoming.at <= start + when:
            state.apply(upcoming)
            upcoming = next(pending, None)
        out.append(state.sample(when, cpu_total))
    return out


def start_latencies(events: list[Event]) -> dict[str, float]:
    """uid -> seconds from binding (PodScheduled) to Running (startTime) of every pod the
    scheduler bound and that ran (the API's timestamps have whole seconds)."""
    out = {}
    for event in events:
        if event.kind != "Pod" or event.type not in ("ADDED", "MODIFIED"):
            continue
        status = event.obj.get("status") or {}
        started = status.get("startTime")
        scheduled = [c["lastTransitionTime"] for c in status.get("conditions") or []
                     if c.get("type") == "PodScheduled" and c.get("status") == "True"]
        if status.get("phase") == "Running" and started and scheduled:
            out[event.obj["metadata"]["uid"]] = timestamp(started) - timestamp(scheduled[0])
    return out


def pods_csv(samples: list[ClusterSample]) -> str:
    """Per sample: unbound, pending and running pods, CPU requested by non-terminal pods."""
    rows = ["t_s,unbound_pods,pending_pods,running_pods,requested_cpu_milli"]
    rows += [f"{s.time:g},{s.unbound_pods},{s.pending_pods},{s.running_pods},"
             f"{s.requested_cpu_milli}" for s in samples]
    return "\n".join(rows) + "\n"
