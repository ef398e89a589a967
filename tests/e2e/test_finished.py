"""A finished TrainingJob stays finished, on the real control plane (issue 29, item 3).

"misconfigured" (kwok's pod-config-error stage: exit 78) fails at once. Its master and
pserver ReplicaSets are then scaled to 0; kube-controller-manager's TTL-after-finished
controller deletes its trainer Job (``ttlSecondsAfterFinished: 0`` set as a user would);
a restarted controller reads the job's Failed status back and creates no child again.
"""

from __future__ import annotations

from e2e.helpers import SYSTEM_NAMESPACE, trainingjob, wait_tj
from e2e.rest import Rest
from polling import wait_until


def replicas(rest: Rest, namespace: str, name: str) -> int | None:
    found = rest.find("ReplicaSet", name, namespace)
    return None if found is None else found["spec"].get("replicas")


def test_a_finished_job_is_never_run_again_and_its_servers_stop(
        rest: Rest, namespace: str, start_controller) -> None:
    first = start_controller("replica-a")
    rest.create(trainingjob("misconfigured", min_instance=1, max_instance=1), namespace)
    failed = wait_tj(rest, namespace, "misconfigured",
                     lambda t: t if t["status"]["state"] == "Failed" else None, timeout=60)
    for role in ("master", "pserver"):
        wait_until(lambda role=role: replicas(rest, namespace, f"misconfigured-{role}") == 0,
                   30, f"the {role} ReplicaSet scaled to 0")
    wait_until(lambda: not [p for p in rest.list("Pod", namespace)
                            if p["metadata"]["labels"].get("edl.dev/role") in
                            ("master", "pserver")], 60, "no master or pserver pod")

    rest.merge("Job", "misconfigured-trainer", {"spec": {"ttlSecondsAfterFinished": 0}},
               namespace)
    wait_until(lambda: rest.find("Job", "misconfigured-trainer", namespace) is None, 60,
               "the TTL-after-finished controller deleted the trainer Job")
    first.stop()
    second = start_controller("replica-b")
    wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
               .get("spec", {}).get("holderIdentity") == "replica-b", 60,
               "the new controller leads")
    wait_until(lambda: "misconfigured is Failed: its children are not created again"
               in second.text(), 60, "the new controller saw the finished job")
    assert rest.find("Job", "misconfigured-trainer", namespace) is None
    assert replicas(rest, namespace, "misconfigured-master") == 0
    after = rest.get("TrainingJob", "misconfigured", namespace)
    assert after["status"]["state"] == "Failed"
    assert after["status"]["message"] == failed["status"]["message"]
