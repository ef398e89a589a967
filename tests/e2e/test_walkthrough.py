"""The README's walkthrough, steps 2-5, on the real control plane.

Cluster: 4 kwok nodes x 4 CPU. The job: the shipped example renamed, trainers 500m, 2..6.
The filler Deployment's pause pods (500m each) overflow the cluster (40 x 500m = 20 CPU),
so the job must shrink to its guarantee; removing them lets it grow back.
"""

from __future__ import annotations

import urllib.request

from e2e.helpers import (
    SYSTEM_NAMESPACE,
    filler,
    parallelism,
    trainer_pods,
    trainingjob,
    wait_tj,
    wait_trainers,
)
from e2e.rest import Rest
from polling import wait_until

CHILDREN = (("Service", "digits-master"), ("ReplicaSet", "digits-master"),
            ("ReplicaSet", "digits-pserver"), ("Job", "digits-trainer"))


def conditions(tj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in tj["status"]["conditions"]}


def test_readme_walkthrough(rest: Rest, namespace: str, start_controller) -> None:
    # Step 2: the controller, as the ServiceAccount of deploy/rbac.yaml, takes the Lease.
    controller = start_controller("replica-a")
    wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
               .get("spec", {}).get("holderIdentity") == "replica-a", 60, "the Lease")

    # Step 3: a job becomes its children, owned by the TrainingJob.
    tj = rest.create(trainingjob("digits"), namespace)
    uid = tj["metadata"]["uid"]
    for kind, name in CHILDREN:
        child = wait_until(lambda k=kind, n=name: rest.find(k, n, namespace), 60, name)
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainingJob", "digits", uid)
        assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
        assert child["metadata"]["labels"]["edl.dev/job"] == "digits"
    assert len(rest.list("Pod", namespace, "edl.dev/job=digits,edl.dev/role=pserver")) == 2

    # The empty cluster has room: the autoscaler grows the job to max-instance.
    wait_trainers(rest, namespace, "digits", 6)
    tj = wait_tj(rest, namespace, "digits",
                 lambda t: t if t["status"]["trainers"]["running"] == 6 else None)
    assert tj["status"]["state"] == "Running"
    assert tj["status"]["observedGeneration"] == 1 and tj["status"]["replicas"] == 6
    assert conditions(tj)["Ready"][0] == "True"
    assert conditions(tj)["Failed"][0] == "False"
    scaled = [e for e in rest.events_for(namespace, "digits") if e["reason"] == "ScalingUp"]
    assert scaled and "vs max_load_desired 0.97" in scaled[-1]["message"]
    assert "-> 6" in " ".join(e["message"] for e in scaled)

    # Step 4: a filler Deployment overflows the cluster; the job shrinks to min-instance.
    filler(rest, namespace, 40)
    wait_trainers(rest, namespace, "digits", 2, timeout=120)
    wait_until(lambda: any(e["reason"] == "ScalingDown"
                           for e in rest.events_for(namespace, "digits")), 30, "ScalingDown")
    # ... and grows back once the filler is gone.
    filler(rest, namespace, 0)
    wait_trainers(rest, namespace, "digits", 6, timeout=120)

    # `kubectl scale tj digits --replicas=4` guarantees 4: a full cluster now stops at 4.
    rest.merge("TrainingJob", "digits", {"spec": {"replicas": 4}}, namespace, sub="scale")
    assert rest.get("TrainingJob", "digits", namespace)["spec"]["trainer"]["min-instance"] == 4
    wait_tj(rest, namespace, "digits", lambda t: t["status"]["observedGeneration"] == 2)
    filler(rest, namespace, 40)
    wait_trainers(rest, namespace, "digits", 4, timeout=120)
    wait_until(lambda: len(rest.list("Pod", namespace, "app=filler")) == 40, 30, "40 filler pods")
    assert parallelism(rest, namespace, "digits") == 4

    # Step 5: metrics, then delete the job with the controller stopped: the garbage
    # collector alone must remove every child and their pods.
    url = f"http://127.0.0.1:{controller.port}/metrics"

    def desired_metric() -> str:
        """The gauge follows the TrainingJob's status (refreshed each second), so it may
        trail the Job's parallelism by a moment."""
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        lines = [line for line in text.splitlines()
                 if line.startswith("edl_job_trainers_desired{") and 'job="digits"' in line
                 and f'namespace="{namespace}"' in line]
        return text if lines and lines[0].endswith(" 4.0") else ""
    metrics = wait_until(desired_metric, 30, "edl_job_trainers_desired 4 for digits")
    assert "edl_leader 1.0" in metrics
    controller.stop()
    rest.delete("TrainingJob", "digits", namespace)
    for kind, name in CHILDREN:
        wait_until(lambda k=kind, n=name: rest.find(k, n, namespace) is None, 60,
                   f"{kind} {name} garbage-collected")
    wait_until(lambda: not rest.list("Pod", namespace, "edl.dev/job=digits"), 60,
               "the job's pods removed")
    assert trainer_pods(rest, namespace, "digits") == []
