"""Issue 30, case 1's pod faults: while the digits job trains on the real node, one of its
trainer pods is deleted, then a pserver pod, then its master pod. The deleted trainer
stops on the kubelet's SIGTERM (gone well within its 30 s grace period) and the Job
replaces it. The job keeps its state on a PersistentVolumeClaim
(`spec.master.etcd-volume`, `spec.pserver.checkpoint-volume`), so each replacement starts
where its predecessor stopped: the new pserver restores its shard's checkpoint (a version
> 0, as its own log says), and the new master pod's etcd reopens the same data, so the new
master resumes its task queue (the pass and the finished tasks its predecessor had
reached, from the term it publishes in the job's etcd and its log) instead of starting the
passes again. The job then Succeeds with every trainer's test accuracy >= 0.95. (The
fault-free README job on the node is tests/node/test_walkthrough.py's.)
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.helpers import trainer_pods, trainingjob, wait_tj
from e2e.rest import Rest
from node.cluster import NodeCluster, master_progress, pod_log, runtime_volumes, state_claim
from polling import wait_until

JOB = "faults"
PASSES = 100  # long enough for both faults once training runs
STATE = "edl-state"  # the claim holding the job's etcd data and pserver checkpoints


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


@pytest.fixture
def state(node_cluster: NodeCluster, namespace: str) -> Iterator[str]:
    """The namespace's writable claim `STATE`; its PersistentVolume goes once the namespace
    (and so the claim) is gone."""
    volume = state_claim(node_cluster, namespace, STATE)
    yield STATE
    node_cluster.rest.delete("PersistentVolume", volume)


def said(cluster: NodeCluster, namespace: str, pod: str, container: str,
         pattern: str) -> re.Match[str]:
    """The first match of `pattern` in the pod's log, once it is there."""
    return wait_until(lambda: re.search(pattern, pod_log(cluster, namespace, pod, container)),
                      120, f"{pod} logging {pattern!r}")


@pytest.mark.timeout(600)
def test_deleted_trainer_pserver_and_master_pods_and_the_job_still_ends_at_its_accuracy(
        node_cluster: NodeCluster, namespace: str, state: str, start_controller) -> None:
    rest = node_cluster.rest
    # the state volumes keep Pod Security `restricted`: the API server enforces it here
    rest.merge("Namespace", namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    start_controller("faults")
    volumes, mounts = runtime_volumes(node_cluster)
    job = trainingjob(JOB, min_instance=2, max_instance=2, passes=PASSES)
    spec = job["spec"]
    spec["image"] = node_cluster.image
    spec["volumes"] = [*volumes, {"name": state, "persistentVolumeClaim": {"claimName": state}}]
    spec["volumeMounts"] = mounts
    spec["master"]["etcd-volume"] = state
    spec["pserver"]["checkpoint-volume"] = state
    rest.create(job, namespace)
    first: dict[str, Any] = wait_until(
        lambda: (p := master_progress(node_cluster, namespace, JOB))
        and p.get("tasks_done", 0) + p.get("pass", 0) > 0 and p, 240,
        "the trainers training (the master counting finished tasks)")
    assert not first["finished"], first

    victim = trainer_pods(rest, namespace, JOB)[0]
    deleted = time.monotonic()
    rest.delete("Pod", victim, namespace)
    wait_until(lambda: rest.find("Pod", victim, namespace) is None, 60, f"{victim} gone")
    assert time.monotonic() - deleted < 20, "the trainer did not stop on SIGTERM"
    wait_until(lambda: len(live(rest, namespace, "trainer")) == 2, 120,
               "the Job's replacement trainer running")

    _, pserver = replace(node_cluster, namespace, "pserver", "registered pserver")
    restored = said(node_cluster, namespace, pserver, "pserver",
                    r"pserver \d+ (restored version (\d+)|serving on)")
    assert restored.group(2) and int(restored.group(2)) > 0, (
        "the new pserver did not restore its shard's checkpoint", restored.group(0))

    before = wait_until(lambda: master_progress(node_cluster, namespace, JOB), 30,
                        "the master's progress")
    _, master = replace(node_cluster, namespace, "master", "master listening")
    leading = said(node_cluster, namespace, master, "master",
                   r"leading \(pass (\d+), (\d+) tasks restored\)")
    term = wait_until(lambda: (p := master_progress(node_cluster, namespace, JOB))
                      and p.get("leader") not in (None, before.get("leader")) and p, 60,
                      "the new master's term in the job's etcd")
    resumed = (term["resumed_pass"], term["resumed_done"])
    assert int(leading.group(2)) > 0, ("the new master restored no task", leading.group(0))
    assert resumed >= (before["pass"], before["tasks_done"]) and resumed > (0, 0), (
        "the new master started the passes again", before, term)
    print(f"pserver {restored.group(0)!r}; master resumed at pass {resumed[0]} with "
          f"{resumed[1]} tasks done (before its deletion: pass {before['pass']}, "
          f"{before['tasks_done']} done)", flush=True)
    state_now = rest.get("TrainingJob", JOB, namespace)["status"]["state"]
    assert state_now == "Running", ("the job ended before both faults were made", state_now)

    wait_tj(rest, namespace, JOB, lambda t: t["status"]["state"] == "Succeeded", 420,
            f"{JOB} Succeeded")
    pods = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
    done = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Succeeded"]
    accuracies = [float(m.group(1)) for name in done
                  if (m := re.search(r"test accuracy ([0-9.]+)",
                                     pod_log(node_cluster, namespace, name)))]
    assert accuracies and min(accuracies) >= 0.95, accuracies
