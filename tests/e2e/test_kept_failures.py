"""Failed trainers edl keeps never eat a namespace's pod quota, on the real control plane
(issue 29, item 7).

A new ResourceQuota caps `count/pods`, which counts terminal pods too: master 1,
pservers 2, one running trainer and four finished ones, plus one of slack for the quota
controller's lag. "crashing" (kwok's pod-crash stage: exit 1) needs 7 counted crashes to
reach its backoffLimit of 6. Were every failed trainer kept, the sixth replacement would
be refused ("exceeded quota") and the job would never end; edl keeps the newest three
failures (their logs) and deletes the older, counted ones, so the job fails as it should.
"""

from __future__ import annotations

from e2e.helpers import trainingjob, wait_tj
from e2e.rest import Rest
from polling import wait_until

CRASH_FLAGS = ("--crash-backoff=1", "--crash-backoff-max=2")
LIMIT = 1 + 2 + 1 + 4 + 1  # master, pservers, a running trainer, 4 finished, slack


def test_kept_failed_trainers_never_fill_a_count_pods_quota(
        rest: Rest, namespace: str, start_controller) -> None:
    rest.create({"apiVersion": "v1", "kind": "ResourceQuota",
                 "metadata": {"name": "pods", "namespace": namespace},
                 "spec": {"hard": {"count/pods": str(LIMIT)}}}, namespace)
    wait_until(lambda: (rest.get("ResourceQuota", "pods", namespace).get("status") or {})
               .get("hard"), 30, "the quota synced")
    start_controller("replica-a", *CRASH_FLAGS)
    rest.create(trainingjob("crashing", min_instance=1, max_instance=1, fault_tolerant=False),
                namespace)
    tj = wait_tj(rest, namespace, "crashing",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=150)
    assert "BackoffLimitExceeded" in tj["status"]["message"]
    job = rest.get("Job", "crashing-trainer", namespace)
    assert job["status"]["failed"] == job["spec"]["backoffLimit"] + 1 == 7
    kept = [p for p in rest.list("Pod", namespace, "edl.dev/job=crashing,edl.dev/role=trainer")
            if p["status"].get("phase") == "Failed"]
    assert len(kept) <= 3
