"""A namespace ResourceQuota against the real API server's quota admission and quota
controller: edl plans the job up to what the quota leaves and no further, says so in the
TrainingJob's `status.plan`, and never has a trainer refused (a 403 in its log fails);
`edl plan` on a snapshot of the cluster decides the same."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from e2e.helpers import parallelism, trainer_pods, trainingjob, wait_tj, wait_trainers
from e2e.rest import Rest
from e2e.snapshot import edl_plan
from polling import wait_until


def test_a_job_stops_at_its_namespace_quota_with_the_reason_in_status(
    rest: Rest, namespace: str, start_controller, tmp_path: Path
) -> None:
    # 7 pods: the master, two pservers and four trainers; the cluster has room for more
    rest.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "cap"},
                 "spec": {"hard": {"count/pods": "7"}}}, namespace)
    start_controller("replica-a")
    rest.create(trainingjob("capped", min_instance=2, max_instance=10), namespace)
    wait_trainers(rest, namespace, "capped", 4, timeout=120)
    quota_reason = f"namespace quota {namespace}/cap (count/pods: 7 of 7"
    tj = wait_tj(rest, namespace, "capped",
                 lambda t: t if quota_reason in t["status"]["plan"]["reason"] else None,
                 timeout=60, label="status.plan names the quota")
    assert tj["status"]["plan"]["target"] == 4, tj["status"]["plan"]
    time.sleep(8)  # a few more autoscaler ticks: no growth past the quota
    assert parallelism(rest, namespace, "capped") == 4
    assert len(trainer_pods(rest, namespace, "capped")) == 4
    pods = rest.list("Pod", namespace)
    assert len(pods) == 7
    # `edl plan` on a snapshot of this cluster decides what the controller decided
    row = edl_plan(rest, tmp_path / "snapshot.json")[(namespace, "capped")]
    assert (row["parallelism"], row["target"]) == (4, 4), row
    assert quota_reason in row["reason"], row


def test_a_job_whose_master_is_refused_never_says_running(
    rest: Rest, namespace: str, start_controller
) -> None:
    """The namespace's LimitRange refuses the master pod (its memory over the max); the
    trainers run, yet the TrainingJob stays Created, not Ready, with the ReplicaSet's
    FailedCreate in its message and a Warning Event of its own, in the API server's words."""
    rest.create({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "max"},
                 "spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]}},
                namespace)
    controller = start_controller("replica-a")
    job = trainingjob("headless", min_instance=2, max_instance=2)
    job["spec"]["master"]["resources"] = {"requests": {"memory": "2Gi"}}
    rest.create(job, namespace)
    wait_trainers(rest, namespace, "headless", 2, timeout=120)
    # LimitRange admission gives the master the max as its limit; validation refuses it
    refusal = 'is invalid: spec.containers[0].resources.requests: Invalid value: "2Gi": ' \
        "must be less than or equal to memory limit of 1Gi"
    tj = wait_tj(rest, namespace, "headless",
                 lambda t: t if refusal in t["status"]["message"] else None,
                 timeout=60, label="the master's refusal in status.message")
    status = tj["status"]
    assert status["message"].startswith('master pods not created: Pod "headless-master-'), status
    assert status["state"] == "Created", status
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "False", ready
    events = wait_until(lambda: [e for e in rest.events_for(namespace, "headless")
                                 if e["reason"] == "FailedCreate"], 30, "a FailedCreate Event")
    assert events[0]["type"] == "Warning" and refusal in events[0]["message"], events
    assert events[0]["involvedObject"]["kind"] == "TrainingJob"
    time.sleep(3)  # several status refreshes with the trainers running: still not Running
    tj = rest.get("TrainingJob", "headless", namespace)
    assert tj["status"]["state"] == "Created" and refusal in tj["status"]["message"]
    assert len(trainer_pods(rest, namespace, "headless")) == 2
    # counted for the PrometheusRule's EdlPodCreatesRefused (deploy/monitoring.yaml)
    with urllib.request.urlopen(f"http://127.0.0.1:{controller.port}/metrics", timeout=10) as r:
        exported = r.read().decode()
    assert 'edl_job_warnings_total{reason="FailedCreate"} 1.0' in exported
