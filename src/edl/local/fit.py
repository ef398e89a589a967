"""Whether a job can ever run on this machine, and why a pod waits (pure).

Why: a local run has one node. When the master, the pservers and the minimum
number of trainers together ask for more than the node's allocatable, some of
them can never be scheduled and the run would wait for ever; it fails at once
instead, with the scheduler's reason (kube-scheduler's words) and the figures.
A pod that only waits for room (a reservation holds it) is shown with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from edl.accounting import PodResources, pod_request
from edl.api.trainingjob import TrainingJob
from edl.jobparser import JobParser

Room = tuple[int, int, int]  # cpu milli, memory mega, gpus


def job_footprint(job: TrainingJob) -> dict[str, tuple[int, PodResources]]:
    """role -> (pods at least, one pod's requests), as the scheduler counts them."""
    parser = JobParser()
    footprint = {}
    children: list[tuple[str, dict[str, Any], int | None]] = [
        ("master", parser.parse_to_master(job), 1)]
    if not job.collective():  # a collective job has no pservers
        children.append(("pserver", parser.parse_to_pserver(job), None))
    children.append(("trainer", parser.parse_to_trainer(job), None))
    for role, child, fixed in children:
        spec = child["spec"]
        count = fixed or int(spec.get("replicas", spec.get("parallelism", 1)) or 0)
        footprint[role] = (count, pod_request({"spec": spec["template"]["spec"]}))
    return footprint


def shortfall(footprint: Mapping[str, tuple[int, PodResources]], allocatable: Room) -> str:
    """'' when the job's minimum fits the node's allocatable, else what it lacks."""
    need = [0, 0, 0]
    for count, res in footprint.values():
        one = (res.cpu_request_milli, res.memory_request_mega, res.gpu_request)
        for i, value in enumerate(one):
            need[i] += count * value
    lacking = [
        f"{name} {fmt(i, want)} (this machine has {fmt(i, have)})"
        for i, (name, want, have) in enumerate(zip(("cpu", "memory", "gpu"), need, allocatable,
                                                   strict=True))
        if want > have
    ]
    if not lacking:
        return ""
    pods = ", ".join(f"{count} {role}{'s' if count != 1 else ''}"
                     for role, (count, _) in footprint.items())
    return f"the job needs at least {', '.join(lacking)} for {pods}"


def fmt(index: int, value: int) -> str:
    return (f"{value}m", f"{value}M", str(value))[index]


def pending_reasons(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """pod name -> the scheduler's reason, for unbound pods it could not place."""
    reasons = {}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                reasons[pod["metadata"]["name"]] = str(condition.get("message", "Unschedulable"))
    return reasons
