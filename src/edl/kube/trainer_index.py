"""Trainer pods as edl's trainer controller reads them, kept from the pod watch.

`ClusterState` drops pod objects after accounting; the trainer controller
(`edl.control.trainer_controller`) needs a little more of its own pods: phase,
node, deletion, conditions and the trainer container's exit, finished pods
included (it counts them once, then deletes them). This index keeps that much
per trainer pod, with Kubernetes' RFC 3339 times turned into epoch seconds (the
`ManagedTrainers` contract), and tells listeners which job changed.
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

JOB_LABEL = "edl.dev/job"
# the trainer controller's marks (edl.control.trainer_pods: created by it, counted)
KEPT_ANNOTATIONS = ("edl.dev/created-by", "edl.dev/counted")
ROLE_LABEL = "edl.dev/role"

PodKey = tuple[str, str]
JobKey = tuple[str, str]


def epoch(value: Any) -> float | None:
    """RFC 3339 (``2026-11-30T16:00:00Z``) or a number -> seconds since the epoch."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dt.datetime):
        moment = value
    else:
        moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainer_job_of(pod: Mapping[str, Any]) -> JobKey | None:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(ROLE_LABEL) != "trainer" or JOB_LABEL not in labels:
        return None
    return meta.get("namespace") or "default", labels[JOB_LABEL]


def slim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What `edl.control.trainers.pod_state` reads, times in epoch seconds."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers = []
    for container in status.get("containerStatuses") or ():
        state = dict(container.get("state") or {})
        terminated = state.get("terminated")
        if terminated is not None:
            state = {"terminated": {
                "exitCode": terminated.get("exitCode", 0),
                "message": terminated.get("message") or "",
                "finishedAt": epoch(terminated.get("finishedAt")),
            }}
        containers.append({"name": container.get("name"), "state": state})
    return {
        "metadata": {
            "name": meta.get("name"), "namespace": meta.get("namespace") or "default",
            "uid": meta.get("uid"), "creationTimestamp": epoch(meta.get("creationTimestamp")),
            "deletionTimestamp": epoch(meta.get("deletionTimestamp")),
            "deletionGracePeriodSeconds": meta.get("deletionGracePeriodSeconds"),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                            if k in KEPT_ANNOTATIONS},
            "finalizers": list(meta.get("finalizers") or ()),
            "ownerReferences": [{"uid": r.get("uid"), "controller": r.get("controller")}
                                for r in meta.get("ownerReferences") or ()
                                if r.get("controller")],
        },
        "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
        "status": {
            "phase": status.get("phase") or "Pending",
            "reason": status.get("reason"),
            "startTime": epoch(status.get("startTime")),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status")}
                for c in status.get("conditions") or ()
            ],
            "containerStatuses": containers,
        },
    }


def _leaving(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pod can change the trainer controller's plan or the status it writes:
    its phase, deletion, readiness, conditions, marks and finalizers."""
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    return (status.get("phase"), meta.get("deletionTimestamp") is not None,
            tuple((c["type"], c["status"]) for c in status.get("conditions") or ()),
            tuple(sorted((meta.get("annotations") or {}).items())),
            tuple(meta.get("finalizers") or ()),
            (pod.get("spec") or {}).get("nodeName") is not None)


class TrainerPodIndex:
    """Slim trainer pod manifests by job, finished ones included, with change listeners."""

    def __init__(self) -> None:
        self._pods: dict[JobKey, dict[PodKey, dict[str, Any]]] = {}
        self._job_of: dict[PodKey, JobKey] = {}
        self._listeners: list[Callable[[str, str], None]] = []

    def set(self, key: PodKey, pod: Mapping[str, Any]) -> None:
        job = trainer_job_of(pod)
        previous = self._job_of.get(key)
        if previous is not None and previous != job:
            self.remove(key)
        if job is None:
            return
        pods = self._pods.setdefault(job, {})
        before = pods.get(key)
        pods[key] = after = slim(pod)
        self._job_of[key] = job
        if before is None or _leaving(before) != _leaving(after):
            self._notify(job)  # new, or a change a plan or the status may show

    def remove(self, key: PodKey) -> None:
        job = self._job_of.pop(key, None)
        if job is None:
            return
        pods = self._pods.get(job, {})
        pods.pop(key, None)
        if not pods:
            self._pods.pop(job, None)
        self._notify(job)

    def keys(self) -> builtins.set[PodKey]:  # `set` here is the method above
        return set(self._job_of)

    def jobs(self) -> list[JobKey]:
        return list(self._pods)

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [dict(pod) for pod in self._pods.get((namespace, job), {}).values()]

    def listen(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    def _notify(self, job: JobKey) -> None:
        for callback in list(self._listeners):
            callback(*job)
