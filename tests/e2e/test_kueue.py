"""TrainingJobs admitted by a real Kueue (issue 31) on the real control plane.

Kueue's controller manager runs out of cluster (the `kueue` fixture, e2e.kueue) with its
batch/job integration; `edl controller --kueue` runs as a ServiceAccount holding
deploy/rbac.yaml and deploy/kueue-rbac.yaml. kwok's trainer pods run no code: a job
finishes when the test, as a kubelet would, marks its trainer pods Succeeded.

Checked: two jobs in one LocalQueue whose ClusterQueue holds one: the second waits, its
status says why in Kueue's words, no trainer of it exists, and it starts when the first
finishes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.helpers import trainer_pods, trainingjob, wait_tj, wait_trainers
from e2e.kueue import Kueue
from e2e.rest import Rest
from polling import wait_until

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture
def queue(kueue: Kueue, namespace: str) -> Iterator[dict[str, str]]:
    """A ResourceFlavor, a ClusterQueue (quota set by the test) and a LocalQueue "team" in
    the test's namespace; the cluster-scoped ones are deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    names = {"flavor": f"default-{suffix}", "cq": f"cq-{suffix}", "lq": "team"}
    kueue.apply({"kind": "ResourceFlavor", "metadata": {"name": names["flavor"]}, "spec": {}})
    yield names
    kueue.delete("LocalQueue", names["lq"], namespace)
    kueue.delete("ClusterQueue", names["cq"])
    kueue.delete("ResourceFlavor", names["flavor"])


def cluster_queue(kueue: Kueue, names: dict[str, str], namespace: str, cpu: str) -> None:
    kueue.apply({"kind": "ClusterQueue", "metadata": {"name": names["cq"]}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": names["flavor"], "resources": [
                {"name": "cpu", "nominalQuota": cpu},
                {"name": "memory", "nominalQuota": "64Gi"}]}]}]}})
    kueue.apply({"kind": "LocalQueue", "metadata": {"name": names["lq"]},
                 "spec": {"clusterQueue": names["cq"]}}, namespace)


def queued_job(name: str, **kwargs: Any) -> dict[str, Any]:
    job = trainingjob(name, **kwargs)
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    return job


def finish(rest: Rest, namespace: str, job: str) -> None:
    """Every running trainer pod of `job` exits 0, as its kubelet would report it."""
    for pod in trainer_pods(rest, namespace, job):
        current = rest.get("Pod", pod, namespace)
        statuses = [{"name": c["name"], "image": c["image"], "ready": False,
                     "restartCount": 0, "state": {"terminated": {
                         "exitCode": 0, "reason": "Completed",
                         "finishedAt": current["status"].get("startTime")}}}
                    for c in current["spec"]["containers"]]
        rest.merge("Pod", pod, {"status": {"phase": "Succeeded",
                                           "containerStatuses": statuses}},
                   namespace, sub="status")


def test_a_second_job_waits_in_kueues_words_and_starts_when_the_first_finishes(
        rest: Rest, kueue: Kueue, namespace: str, queue: dict[str, str],
        start_kueue_controller) -> None:
    # two trainers of 250m each: the ClusterQueue holds one job, not two
    cluster_queue(kueue, queue, namespace, cpu="750m")
    start_kueue_controller()
    rest.create(queued_job("first", min_instance=2, max_instance=2, trainer_cpu="250m"),
                namespace)
    wait_trainers(rest, namespace, "first", 2)
    rest.create(queued_job("second", min_instance=2, max_instance=2, trainer_cpu="250m"),
                namespace)
    status = wait_tj(rest, namespace, "second",
                     lambda t: t["status"]["message"] if "Kueue" in t["status"]["message"]
                     else None, label="second waiting in Kueue's words")
    assert "waiting for admission" in status and "insufficient unused quota" in status, status
    assert not rest.list("Pod", namespace, "edl.dev/job=second,edl.dev/role=trainer")

    finish(rest, namespace, "first")
    wait_tj(rest, namespace, "first", lambda t: t["status"]["state"] == "Succeeded")
    wait_trainers(rest, namespace, "second", 2)
    (workload,) = [w for w in kueue.list("Workload", namespace)
                   if w["metadata"]["ownerReferences"][0]["name"] == "second-trainer"]
    assert workload["status"]["admission"]["clusterQueue"] == queue["cq"]
    wait_until(lambda: not trainer_pods(rest, namespace, "first"), 30, "first's pods gone")
