"""Issue 30, case 1's pod faults beyond a trainer's: while the digits job trains on the real
node, one of its pserver pods is deleted, then its master pod. Each is replaced (the
ReplicaSet's new pod runs: a pserver registers its shard index again, a master listens
again, as their own logs say), and the job still ends Succeeded with every trainer's test
accuracy >= 0.95.

What the replacements start from is not asserted: a pserver's checkpoint is written in
its container (under the workspace) unless EDL_CHECKPOINT_DIR names a volume, and the
master's etcd sidecar keeps its data in an emptyDir (docs/testing.md, "The node tier").
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from e2e.helpers import trainingjob, wait_tj
from e2e.rest import Rest
from node.cluster import NodeCluster, master_progress, pod_log, runtime_volumes
from polling import wait_until

JOB = "faults"
PASSES = 100  # long enough for both faults once training runs


def live(rest: Rest, namespace: str, role: str) -> list[str]:
    """The role's Running pods that are not being deleted."""
    return sorted(p["metadata"]["name"] for p in
                  rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role={role}")
                  if p["status"].get("phase") == "Running"
                  and not p["metadata"].get("deletionTimestamp"))


def replace(cluster: NodeCluster, namespace: str, role: str, said: str) -> tuple[str, str]:
    """Delete one pod of `role`; (the deleted pod, its replacement), once the replacement's
    log (pods/log) shows `said`."""
    rest = cluster.rest
    before = wait_until(lambda: live(rest, namespace, role), 60, f"a {role} running")
    victim = before[0]
    rest.delete("Pod", victim, namespace)
    new = wait_until(lambda: [p for p in live(rest, namespace, role) if p not in before], 120,
                     f"a new {role} pod running")[0]
    wait_until(lambda: said in pod_log(cluster, namespace, new, role), 120,
               f"{new} saying '{said}'")
    return victim, new


@pytest.mark.timeout(600)
def test_a_deleted_pserver_and_master_are_replaced_and_the_job_reaches_its_accuracy(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    rest = node_cluster.rest
    start_controller("faults")
    volumes, mounts = runtime_volumes(node_cluster)
    job = trainingjob(JOB, min_instance=2, max_instance=2, passes=PASSES)
    job["spec"]["image"] = node_cluster.image
    job["spec"]["volumes"], job["spec"]["volumeMounts"] = volumes, mounts
    rest.create(job, namespace)
    first: dict[str, Any] = wait_until(
        lambda: (p := master_progress(node_cluster, namespace, JOB))
        and p.get("tasks_done", 0) + p.get("pass", 0) > 0 and p, 240,
        "the trainers training (the master counting finished tasks)")
    assert not first["finished"], first

    replace(node_cluster, namespace, "pserver", "registered pserver")
    replace(node_cluster, namespace, "master", "master listening")
    state = rest.get("TrainingJob", JOB, namespace)["status"]["state"]
    assert state == "Running", ("the job ended before both faults were made", state)

    wait_tj(rest, namespace, JOB, lambda t: t["status"]["state"] == "Succeeded", 420,
            f"{JOB} Succeeded")
    pods = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
    done = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Succeeded"]
    accuracies = [float(m.group(1)) for name in done
                  if (m := re.search(r"test accuracy ([0-9.]+)",
                                     pod_log(node_cluster, namespace, name)))]
    assert accuracies and min(accuracies) >= 0.95, accuracies
