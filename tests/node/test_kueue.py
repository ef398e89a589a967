"""Issue 31, case 3 with a real master: a real Kueue (e2e.kueue, its manager out of cluster
on the node tier's control plane) preempts a running digits job for a higher-priority
Workload. edl deletes the whole job (the trainers and pservers, then the master) and
requeues it; Kueue readmits it when the urgent work goes; the readmitted master resumes
the task queue its predecessor left in the job's etcd, on the job's state volume
(`spec.master.etcd-volume`, `spec.pserver.checkpoint-volume`), its pservers restore their
checkpoints, and the job Succeeds at accuracy >= 0.95. The controller is SIGKILLed while
the job waits for readmission and restarted (case 5). The master's completed-task count,
read from the job's etcd five times a second through the whole run, never goes
backwards. Without the state volumes the readmitted master starts the passes again, and
the test fails.
"""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.helpers import Controller, trainingjob, wait_tj
from e2e.kueue import Kueue, kueue_controller_account
from node.cluster import (
    NodeCluster,
    controllers,
    master_progress,
    pod_log,
    runtime_volumes,
    state_claim,
)
from node.node import PAUSE_IMAGE
from paced import paced_digits_script
from polling import wait_until

JOB = "queued"
PASSES = 20  # preempted after its first pass, the rest after readmission
# a pause per step (tests/paced.py): a pass of one trainer (45 steps) lasts at least
# 0.45 s on any machine, so the job cannot finish in the seconds the preemption takes
PAUSE_S = 0.01
STATE = "edl-state"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@pytest.fixture
def start_kueue_controller(node_cluster: NodeCluster, kueue: Kueue,
                           tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """`start(identity, *args)` runs `edl controller --kueue` as its Kueue account, images
    set to the node's; every one started is stopped after the test, and a 403 in its log
    fails it."""
    kubeconfig = kueue_controller_account(node_cluster.plane)
    with controllers(kubeconfig, node_cluster, tmp_path, "--kueue") as (start, started):
        yield start
    refused = [line for c in started for line in c.forbidden_lines()]
    assert not refused, refused[:20]


class Progress:
    """The master's progress records, sampled from the job's etcd in a thread: (seconds,
    leader, completed tasks, record) whenever a master is readable."""

    def __init__(self, cluster: NodeCluster, namespace: str) -> None:
        self.samples: list[tuple[float, str, int, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cluster, namespace),
                                        daemon=True)

    def _run(self, cluster: NodeCluster, namespace: str) -> None:
        start = time.monotonic()
        while not self._stop.wait(0.2):
            record = master_progress(cluster, namespace, JOB)
            if record and record.get("tasks_total"):
                done = record["pass"] * record["tasks_total"] + record["tasks_done"]
                self.samples.append((round(time.monotonic() - start, 1),
                                     str(record.get("leader")), done, record))

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def last(self) -> dict[str, Any] | None:
        return self.samples[-1][3] if self.samples else None


def urgent_job(namespace: str, cpu: str) -> dict[str, Any]:
    """A plain batch Job of the high WorkloadPriorityClass (another team's work): a pause
    pod on the node, until the test deletes the Job."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "namespace": namespace,
                         "labels": {QUEUE_LABEL: "team", PRIORITY_LABEL: "node-high"}},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "work", "image": PAUSE_IMAGE,
                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]}}}}


def queues(kueue: Kueue, namespace: str, suffix: str) -> None:
    """A ResourceFlavor, a ClusterQueue of 1 CPU that preempts lower priorities within it,
    a LocalQueue `team`, and the two WorkloadPriorityClasses."""
    for name, value in (("node-low", 10), ("node-high", 1000)):
        kueue.apply({"kind": "WorkloadPriorityClass", "metadata": {"name": name},
                     "value": value})
    kueue.apply({"kind": "ResourceFlavor", "metadata": {"name": f"node-{suffix}"}, "spec": {}})
    kueue.apply({"kind": "ClusterQueue", "metadata": {"name": f"cq-{suffix}"}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": f"node-{suffix}", "resources": [
                {"name": "cpu", "nominalQuota": "1"},
                {"name": "memory", "nominalQuota": "8Gi"}]}]}]}})
    kueue.apply({"kind": "LocalQueue", "metadata": {"name": "team"},
                 "spec": {"clusterQueue": f"cq-{suffix}"}}, namespace)


def said(cluster: NodeCluster, namespace: str, pod: str, container: str,
         pattern: str) -> re.Match[str]:
    """The first match of `pattern` in the pod's log (pods/log), once it is there."""
    return wait_until(lambda: re.search(pattern, pod_log(cluster, namespace, pod, container)),
                      120, f"{pod} logging {pattern!r}")


def job_pods(cluster: NodeCluster, namespace: str, role: str = "") -> list[str]:
    selector = f"edl.dev/job={JOB}" + (f",edl.dev/role={role}" if role else "")
    return [p["metadata"]["name"] for p in cluster.rest.list("Pod", namespace, selector)
            if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


@pytest.mark.timeout(600)
def test_kueue_preempts_a_running_job_which_resumes_its_tasks_and_succeeds(
        node_cluster: NodeCluster, namespace: str, kueue: Kueue,
        start_kueue_controller: Callable[..., Controller]) -> None:
    rest = node_cluster.rest
    controller = start_kueue_controller("kueue")
    state = state_claim(node_cluster, namespace, STATE)
    suffix = namespace.removeprefix("node-")
    try:
        queues(kueue, namespace, suffix)
        volumes, mounts = runtime_volumes(node_cluster)
        # 650m in all (master and its etcd 200m, 2 pservers 200m, 1 trainer 250m) of the
        # queue's 1 CPU: the urgent 800m needs both of the job's Workloads preempted
        job = trainingjob(JOB, min_instance=1, max_instance=1, trainer_cpu="250m",
                          passes=PASSES)
        job["metadata"]["labels"] = {QUEUE_LABEL: "team", PRIORITY_LABEL: "node-low"}
        spec = job["spec"]
        spec["image"] = node_cluster.image
        rest.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paced"},
                     "data": {"train.py": paced_digits_script(PAUSE_S)}}, namespace)
        spec["trainer"]["workspace"] = "/paced"
        spec["volumes"] = [*volumes, {"name": STATE,
                                      "persistentVolumeClaim": {"claimName": STATE}},
                           {"name": "paced", "configMap": {"name": "paced"}}]
        spec["volumeMounts"] = [*mounts, {"name": "paced", "mountPath": "/paced"}]
        spec["master"]["etcd-volume"] = spec["pserver"]["checkpoint-volume"] = STATE
        with Progress(node_cluster, namespace) as progress:
            rest.create(job, namespace)
            before = wait_until(lambda: (p := progress.last()) and p["pass"] >= 1 and p, 240,
                                "the job past its first pass (the master counting tasks)")
            assert not before["finished"], before
            old_pods = set(job_pods(node_cluster, namespace))

            rest.create(urgent_job(namespace, cpu="800m"), namespace)
            preempted = time.monotonic()
            wait_tj(rest, namespace, JOB, lambda t: t["status"]["message"].startswith(
                f"Kueue evicted workload {JOB}-servers"), 60, f"{JOB} evicted by Kueue")
            wait_until(lambda: not rest.list("Pod", namespace, f"edl.dev/job={JOB}"), 90,
                       f"{JOB}'s trainers, master and pservers gone", interval=0.2)
            gone = time.monotonic()
            wait_until(lambda: any(p["status"].get("phase") == "Running" for p in
                                   rest.list("Pod", namespace, "job-name=urgent")),
                       60, "the urgent work running on the node")
            last_before = progress.samples[-1]
            # the controller is SIGKILLed while the job waits; Kueue readmits it when the
            # urgent work goes, and the restarted controller (same identity: it takes its
            # Lease back at once) brings it back
            controller.stop(signal.SIGKILL)
            rest.delete("Job", "urgent", namespace)
            readmitted = time.monotonic()
            start_kueue_controller("kueue-restarted", "--identity=kueue")

            master = wait_until(lambda: job_pods(node_cluster, namespace, "master"), 120,
                                "the readmitted job's master running")[0]
            assert master not in old_pods
            leading = said(node_cluster, namespace, master, "master",
                           r"leading \(pass (\d+), (\d+) tasks restored\)")
            # the readmitted pservers restore their shards' checkpoints (their final ones
            # are registered in the master pod's etcd: edl deletes the master last)
            pservers = wait_until(lambda: len(p := job_pods(node_cluster, namespace,
                                                            "pserver")) == 2 and p, 120,
                                  "the readmitted job's pservers running")
            restored = [said(node_cluster, namespace, name, "pserver",
                             r"pserver \d+ (restored version (\d+)|serving on)")
                        for name in pservers]
            wait_tj(rest, namespace, JOB, lambda t: t["status"]["state"] == "Succeeded", 300,
                    f"{JOB} Succeeded")
            ended = time.monotonic()
        samples = progress.samples
        print(f"preempted at pass {before['pass']}, last seen before the deletion "
              f"{last_before[2]} tasks; {leading.group(0)}; the job's pods gone "
              f"{gone - preempted:.1f} s after the urgent Job; preemption to readmission "
              f"{readmitted - preempted:.1f} s, readmission to Succeeded "
              f"{ended - readmitted:.1f} s; {len(samples)} samples; pservers: "
              f"{[r.group(0) for r in restored]}", flush=True)
        leaders = list(dict.fromkeys(leader for _, leader, _, _ in samples))
        assert len(leaders) >= 2, ("no sample of the readmitted master", leaders)
        backwards = [(a[:3], b[:3]) for a, b in itertools.pairwise(samples) if b[2] < a[2]]
        assert not backwards, ("the completed-task count went backwards", backwards[:5])
        term = next(r for _, leader, _, r in samples if leader == leaders[-1])
        assert int(leading.group(2)) > 0, ("the readmitted master restored no task",
                                          leading.group(0))
        resumed = term["resumed_pass"] * last_before[3]["tasks_total"] + term["resumed_done"]
        assert resumed >= last_before[2] > 0, (
            "the readmitted master started the passes again", last_before[3], term)
        assert all(r.group(2) and int(r.group(2)) > 0 for r in restored), (
            "a readmitted pserver did not restore its checkpoint", [r.group(0) for r in restored])
        # the model still reaches its accuracy (each trainer's own log)
        pods = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
        accuracies = [float(m.group(1)) for p in pods
                      if p["status"].get("phase") == "Succeeded"
                      and (m := re.search(r"test accuracy ([0-9.]+)", pod_log(
                          node_cluster, namespace, p["metadata"]["name"])))]
        assert accuracies and min(accuracies) >= 0.95, accuracies
    finally:
        rest.delete("TrainingJob", JOB, namespace)
        rest.delete("Job", "urgent", namespace)
        kueue.delete("LocalQueue", "team", namespace)
        kueue.delete("ClusterQueue", f"cq-{suffix}")
        kueue.delete("ResourceFlavor", f"node-{suffix}")
        rest.delete("PersistentVolume", state)
