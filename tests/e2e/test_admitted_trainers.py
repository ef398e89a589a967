"""What admission makes of trainer pods, read by a server-side dry-run create, against the
real API server's admission: a LimitRange's default request of a resource the template
does not ask for is planned (fewer trainers fit, and every planned one runs); a trainer
PriorityClass that does not exist yet holds the job with the API server's words in
`status.plan`, and once it is created the PriorityClass watch has the job grown within
seconds."""

from __future__ import annotations

import time

from e2e.control_plane import ControlPlane
from e2e.helpers import parallelism, trainer_pods, trainingjob, wait_tj
from e2e.rest import Rest
from polling import wait_until

WIDGET = "example.com/widget"


def test_a_limit_range_default_request_is_planned(
    rest: Rest, plane: ControlPlane, namespace: str, start_controller
) -> None:
    # every container of the namespace gets one widget; only two nodes have any (4 each):
    # the master (two containers) and two pservers take 4, so 4 trainers fit
    widgets = plane.add_nodes(2, prefix="kwok-widget", allocatable={WIDGET: "4"})
    try:
        rest.create({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "widget"},
                     "spec": {"limits": [{"type": "Container", "default": {WIDGET: "1"},
                                          "defaultRequest": {WIDGET: "1"}}]}}, namespace)
        start_controller("replica-a")
        rest.create(trainingjob("defaulted", min_instance=1, max_instance=10), namespace)

        def settled() -> list[dict] | None:
            pods = [p for p in rest.list("Pod", namespace,
                                         "edl.dev/job=defaulted,edl.dev/role=trainer")
                    if not p["metadata"].get("deletionTimestamp")]
            if len(pods) < 2 or len(pods) != parallelism(rest, namespace, "defaulted"):
                return None
            return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

        # the template's plan (no widget) was 10 trainers, 6 of them Pending for ever
        pods = wait_until(settled, 90, "every planned trainer running")
        assert {p["spec"]["nodeName"] for p in pods} <= set(widgets)
        assert all(p["spec"]["containers"][0]["resources"]["requests"][WIDGET] == "1"
                   for p in pods)
        tj = rest.get("TrainingJob", "defaulted", namespace)
        assert tj["status"]["plan"]["target"] == len(pods) == 4, tj["status"]["plan"]
    finally:
        rest.delete("TrainingJob", "defaulted", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        for name in widgets:
            rest.delete("Node", name)


def test_a_priority_class_created_later_is_seen_within_seconds(
    rest: Rest, namespace: str, start_controller
) -> None:
    klass = f"late-{namespace}"
    controller = start_controller("replica-a")
    start = controller.offset()
    job = trainingjob("late", min_instance=1, max_instance=3)
    job["spec"]["trainer"]["priorityClassName"] = klass
    rest.create(job, namespace)
    refusal = f"no PriorityClass with name {klass} was found"
    try:
        # held at its size: the old plan grew it to 3 trainers that could never be created
        tj = wait_tj(rest, namespace, "late",
                     lambda t: t if refusal in t["status"]["plan"]["reason"] else None,
                     timeout=60, label="status.plan names the refusal")
        plan = tj["status"]["plan"]
        assert plan["reason"].startswith("keep 1: the API server refuses trainer pods: ")
        assert plan["target"] == 1 and parallelism(rest, namespace, "late") == 1, plan
        assert [line for line in controller.text().splitlines()
                if "POST" in line and "dryRun=All" in line and " 403 " in line], \
            "the refusal came from a dry-run create"
        rest.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": klass}, "value": 1000})
        created = time.monotonic()
        wait_tj(rest, namespace, "late", lambda t: t["status"]["plan"]["target"] == 3,
                timeout=15, label="the job planned to 3 once the class exists")
        seen = time.monotonic() - created
        controller.excused.append((start, controller.offset()))  # the refusals were the point
        wait_until(lambda: len(trainer_pods(rest, namespace, "late")) == 3, 60,
                   "3 trainers running")
        pod = rest.list("Pod", namespace, "edl.dev/job=late,edl.dev/role=trainer")[0]
        assert pod["spec"]["priority"] == 1000
        print(f"PriorityClass created -> plan grown: {seen:.1f} s")
    finally:
        rest.delete("TrainingJob", "late", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        rest.delete("PriorityClass", klass)
