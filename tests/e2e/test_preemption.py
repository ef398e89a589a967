"""kube-scheduler's own preemption against edl's trainers, on the real control plane.

An admin gives a service a higher PriorityClass; when it scales up into a cluster full of
trainers, kube-scheduler (DefaultPreemption) evicts trainers at once, without waiting for
edl. edl must take that as a shrink: the preempted trainers (deleted with the
`DisruptionTarget` condition, reason `PreemptionByScheduler`) are never counted as crashes
(no `failed` in the trainer Job's status, no crash back-off, the TrainingJob keeps
running), and the trainers come back when the service scales down."""

from __future__ import annotations

from typing import Any

from e2e.helpers import parallelism, trainingjob
from e2e.rest import Rest
from polling import wait_until

JOB = "elastic"


def _service(namespace: str, replicas: int, priority_class: str) -> dict[str, Any]:
    """A Deployment of pause pods (1 CPU each) with the admin's higher PriorityClass."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "svc", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "svc"}},
            "template": {
                "metadata": {"labels": {"app": "svc"}},
                "spec": {"priorityClassName": priority_class,
                         "containers": [{
                             "name": "pause", "image": "registry.k8s.io/pause:3.9",
                             "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]},
            },
        },
    }


def _live_trainers(rest: Rest, namespace: str) -> list[dict[str, Any]]:
    return [p for p in rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
            if not p["metadata"].get("deletionTimestamp")]


def _settled(rest: Rest, namespace: str, at_least: int = 1) -> int | None:
    """The trainer count once parallelism equals the trainers, all Running, else None."""
    pods = _live_trainers(rest, namespace)
    want = parallelism(rest, namespace, JOB)
    if want is None or want < at_least or len(pods) != want:
        return None
    return want if all(p["status"].get("phase") == "Running" for p in pods) else None


def _running(rest: Rest, namespace: str) -> int:
    return sum(p["status"].get("phase") == "Running" for p in _live_trainers(rest, namespace))


def _trainer_job_status(rest: Rest, namespace: str) -> dict[str, Any]:
    return rest.get("Job", f"{JOB}-trainer", namespace).get("status") or {}


def test_kube_scheduler_preempting_trainers_is_a_shrink(
    rest: Rest, namespace: str, start_controller
) -> None:
    high = f"service-high-{namespace}"
    rest.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": high}, "value": 100000, "preemptionPolicy":
                 "PreemptLowerPriority", "description": "e2e: a service above trainers"})
    try:
        start_controller("replica-a")
        # more trainers than the cluster holds: the job grows until the cluster is full
        rest.create(trainingjob(JOB, min_instance=1, max_instance=40, trainer_cpu="1"),
                    namespace)
        full = wait_until(lambda: _settled(rest, namespace, at_least=6), 120,
                          "the job grown to the cluster's room, every trainer running")
        assert full >= 6, full

        rest.apply([_service(namespace, 4, high)])
        wait_until(lambda: len([p for p in rest.list("Pod", namespace, "app=svc")
                                if p["status"].get("phase") == "Running"]) == 4,
                   90, "the service's 4 pods running")
        # kube-scheduler, not edl, made the room: trainers carry its Preempted event
        preempted = {e["involvedObject"]["name"] for e in rest.list("Event", namespace)
                     if e.get("reason") == "Preempted"
                     and e["involvedObject"]["name"].startswith(f"{JOB}-trainer")}
        assert preempted, "no trainer was preempted by kube-scheduler"
        # the job is above its min: its replacements that fit nowhere leave the target at
        # the next plan (interval 1 s) instead of staying Pending (the scheduler retries
        # an unschedulable pod within 10 s; 15 s of slack for a loaded machine)
        wait_until(lambda: _settled(rest, namespace) is not None, 26,
                   "no trainer Pending once the target follows what can land")

        # the job runs fewer trainers while the service runs: the scheduler's victims
        # (and any trainer edl drained for the service) are gone, none came back Running
        running = wait_until(
            lambda: (n := _running(rest, namespace)) <= full - 3 and n, 60,
            "the trainers the service displaced gone")
        assert running < full
        status = _trainer_job_status(rest, namespace)
        assert not status.get("failed"), status
        tj = rest.get("TrainingJob", JOB, namespace)
        assert tj["status"]["state"] == "Running", tj["status"]
        crash_events = [e for e in rest.list("Event", namespace)
                        if "crash" in (e.get("message") or "").lower()
                        or "backoff" in (e.get("reason") or "").lower()]
        assert not crash_events, crash_events

        rest.merge("Deployment", "svc", {"spec": {"replicas": 0}}, namespace)
        wait_until(lambda: _settled(rest, namespace) == full, 120,
                   f"the job back at {full} trainers once the service scaled down")
        status = _trainer_job_status(rest, namespace)
        assert not status.get("failed"), status
        assert rest.get("TrainingJob", JOB, namespace)["status"]["state"] == "Running"
    finally:
        rest.delete("TrainingJob", JOB, namespace)
        rest.delete("Deployment", "svc", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        rest.delete("PriorityClass", high)
