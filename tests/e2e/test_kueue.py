"""TrainingJobs admitted by a real Kueue (issue 31) on the real control plane.

Kueue's controller manager runs out of cluster (the `kueue` fixture, e2e.kueue) with its
batch/job integration; `edl controller --kueue` runs as a ServiceAccount holding
deploy/rbac.yaml and deploy/kueue-rbac.yaml. kwok's trainer pods run no code: a job
finishes when the test, as a kubelet would, marks its trainer pods Succeeded.

Checked: two jobs in one LocalQueue whose ClusterQueue holds one — the whole job counts
(the ClusterQueue's usage includes the master's and pservers' requests, through edl's
servers' Workload), the second waits with nothing of it running, not even its master and
pservers, its status says why in Kueue's words, and it starts when the first finishes,
with the controller SIGKILLed mid-way; a higher-priority Workload preempts a job — its
master's and pservers' Workload evicted, every pod of it deleted within seconds, its
quota given back, readmitted while the controller is SIGKILLed, resumed by the restarted
controller and completed, its master and pservers recreated on the same state volume and
directories (`spec.master.etcd-volume`, `spec.pserver.checkpoint-volume`); a
ResourceFlavor's node labels and toleration reach every trainer, master and pserver; an
elastic job grows to exactly what its ClusterQueue admits with cohort borrowing (less
its master and pservers), the controller SIGKILLed and restarted mid-growth, never runs
more trainers than Kueue admitted, and its shrink admits a queued job. In every test
Kueue stopped or evicted a job only for a preemption, never because of a change edl made.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.control_plane import ControlPlane
from e2e.helpers import parallelism, trainer_pods, trainingjob, wait_tj, wait_trainers
from e2e.kueue import Kueue
from e2e.rest import Rest
from edl.api.quantity import cpu_milli
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


STATE_VOLUME = {"name": "state", "nfs": {"server": "nfs.example", "path": "/edl"}}


def state_places(rest: Rest, namespace: str, job: str) -> dict[str, Any]:
    """Where the master's etcd keeps its data and the pservers checkpoint (volume and
    directory, from their ReplicaSets), and the ReplicaSets' uids."""
    master = rest.get("ReplicaSet", f"{job}-master", namespace)
    pserver = rest.get("ReplicaSet", f"{job}-pserver", namespace)
    pods = [r["spec"]["template"]["spec"] for r in (master, pserver)]
    etcd = next(c for c in pods[0]["containers"] if c["name"] == "etcd")
    data_dir = next(a for a in etcd["command"] if a.startswith("--data-dir="))
    checkpoints = next(v["value"] for v in pods[1]["containers"][0]["env"]
                       if v["name"] == "EDL_CHECKPOINT_DIR")
    assert all(STATE_VOLUME in pod["volumes"] for pod in pods), pods
    assert not any("emptyDir" in v for v in pods[0]["volumes"]), pods[0]["volumes"]
    return {"places": (data_dir, checkpoints),
            "uids": (master["metadata"]["uid"], pserver["metadata"]["uid"])}


def queued_job(name: str, **kwargs: Any) -> dict[str, Any]:
    job = trainingjob(name, **kwargs)
    job["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    return job


def restart(start: Callable[..., Any], killed: Any) -> Any:
    """The SIGKILLed controller's container restarted (same identity: it takes its Lease
    back at once, without waiting for it to expire)."""
    return start(f"{killed.identity}-restarted", f"--identity={killed.identity}")


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


def evictions(rest: Rest, namespace: str) -> list[str]:
    """Kueue's Events of evicting a Workload or stopping (suspending) its Job, as
    "reason: message": a Job whose parallelism left its admitted Workload shows here."""
    found = []
    for event in rest.list("Event", namespace):
        kind = event.get("involvedObject", {}).get("kind")
        reason = str(event.get("reason", ""))
        if (kind == "Workload" and reason.startswith("Evicted")) or (
                kind == "Job" and reason == "Stopped"):
            found.append(f"{reason}: {event.get('message') or event.get('note')}")
    return found


def queue_usage(kueue: Kueue, cq: str) -> int:
    """The milli-CPU a ClusterQueue has reserved for its admitted Workloads."""
    status = kueue.get("ClusterQueue", cq).get("status") or {}
    return sum(cpu_milli(r["total"]) for f in status.get("flavorsReservation") or ()
               for r in f.get("resources") or () if r["name"] == "cpu")


def admitted_counts(kueue: Kueue, namespace: str) -> dict[str, int]:
    """Per trainer Job, the pod count its admitted (unfinished) Workload holds quota for."""
    counts = {}
    for workload in kueue.list("Workload", namespace):
        status = workload.get("status") or {}
        finished = any(c["type"] == "Finished" and c["status"] == "True"
                       for c in status.get("conditions") or ())
        admission = status.get("admission")
        if admission and not finished:
            owner = workload["metadata"]["ownerReferences"][0]["name"]
            counts[owner] = sum(a.get("count", 0) for a in admission["podSetAssignments"])
    return counts


def test_a_second_job_waits_in_kueues_words_and_starts_when_the_first_finishes(
        rest: Rest, kueue: Kueue, namespace: str, queue: dict[str, str],
        start_kueue_controller) -> None:
    # a job asks 900m: master 200m (with its etcd sidecar), 2 pservers of 100m, 2 trainers
    # of 250m; the ClusterQueue holds one job, and not even the second's master and pservers
    cluster_queue(kueue, queue, namespace, cpu="1200m")
    controller = start_kueue_controller("replica-a")
    rest.create(queued_job("first", min_instance=2, max_instance=2, trainer_cpu="250m"),
                namespace)
    wait_trainers(rest, namespace, "first", 2)
    rest.create(queued_job("second", min_instance=2, max_instance=2, trainer_cpu="250m"),
                namespace)
    status = wait_tj(rest, namespace, "second",
                     lambda t: t["status"]["message"] if "Kueue: " in t["status"]["message"]
                     and "quota" in t["status"]["message"] else None,
                     label="second waiting in Kueue's words")
    assert status.startswith("master and pservers waiting for admission: Kueue: "), status
    assert "insufficient unused quota for cpu" in status, status
    # the whole job counts against the ClusterQueue: the first's master and pservers too
    assert admitted_counts(kueue, namespace) == {"first-trainer": 2, "first": 3}
    assert queue_usage(kueue, queue["cq"]) == 900
    assert not rest.list("Pod", namespace, "edl.dev/job=second")  # nothing of it runs

    # the controller is SIGKILLed; the first job finishes meanwhile; another replica
    # takes over (after the Lease expires) and the outcome is the same
    controller.stop(signal.SIGKILL)
    finish(rest, namespace, "first")
    start_kueue_controller("replica-b")
    wait_tj(rest, namespace, "first", lambda t: t["status"]["state"] == "Succeeded")
    wait_trainers(rest, namespace, "second", 2)
    wait_until(lambda: admitted_counts(kueue, namespace) == {"second-trainer": 2, "second": 3},
               30, "only the second job holds quota")
    assert len(trainer_pods(rest, namespace, "second")) == 2
    assert not evictions(rest, namespace)  # nothing edl did made Kueue evict a job

GPU_TAINT = {"key": "example.com/pool", "value": "gpu", "effect": "NoSchedule"}


def test_a_resource_flavors_node_labels_and_toleration_reach_every_trainer(
        rest: Rest, plane: ControlPlane, kueue: Kueue, namespace: str,
        queue: dict[str, str], start_kueue_controller) -> None:
    pool = plane.add_nodes(2, prefix=f"kwok-pool-{queue['cq']}", labels={"pool": "tainted-gpu"},
                           taints=[GPU_TAINT])
    try:
        kueue.apply({"kind": "ResourceFlavor", "metadata": {"name": queue["flavor"]}, "spec": {
            "nodeLabels": {"pool": "tainted-gpu"},
            "tolerations": [{**GPU_TAINT, "operator": "Equal"}]}})
        cluster_queue(kueue, queue, namespace, cpu="4")
        # a status refresh only every 30 s: the servers' admission must come by the watch
        start_kueue_controller("replica-a", "--status-interval=30")
        created = time.monotonic()
        rest.create(queued_job("placed", min_instance=3, max_instance=3, trainer_cpu="250m"),
                    namespace)
        wait_until(lambda: rest.find("ReplicaSet", "placed-master", namespace), 30,
                   "the master created once Kueue admits its servers' Workload")
        admitted_after = time.monotonic() - created
        assert admitted_after < 10, f"the admission reached edl {admitted_after:.1f} s late"
        wait_trainers(rest, namespace, "placed", 3)
        pods = rest.list("Pod", namespace, "edl.dev/job=placed,edl.dev/role=trainer")
        assert {p["spec"]["nodeName"] for p in pods} <= set(pool), pods
        # and so do the master's and the pservers' (their Workload's admission)
        def servers() -> list[dict[str, Any]]:
            found = [p for p in rest.list("Pod", namespace, "edl.dev/job=placed")
                     if p["metadata"]["labels"].get("edl.dev/role") in ("master", "pserver")
                     and p["spec"].get("nodeName")]
            return found if len(found) == 3 else []

        bound = wait_until(servers, 60, "master and pservers bound")
        for pod in pods + bound:
            assert pod["spec"]["nodeName"] in pool, pod["metadata"]["name"]
            assert pod["spec"]["nodeSelector"]["pool"] == "tainted-gpu"
            assert any(t.get("key") == GPU_TAINT["key"] for t in pod["spec"]["tolerations"])
    finally:
        rest.delete("TrainingJob", "placed", namespace)
        wait_until(lambda: not rest.list("Pod", namespace, "edl.dev/job=placed"), 120,
                   "the job's pods removed")
        for name in pool:
            rest.delete("Node", name)


def live_trainers(rest: Rest, namespace: str, job: str) -> list[dict[str, Any]]:
    """The job's trainer pods not being deleted, whatever their phase."""
    return [p for p in rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=trainer")
            if not p["metadata"].get("deletionTimestamp")]


def evicted(kueue: Kueue, namespace: str, workload: str) -> bool:
    found = [w for w in kueue.list("Workload", namespace)
             if w["metadata"]["name"] == workload]
    return any(c["type"] == "Evicted" and c["status"] == "True"
               for w in found for c in (w.get("status") or {}).get("conditions") or ())


def high_priority_job(namespace: str, cpu: str) -> dict[str, Any]:
    """A plain batch Job of the high WorkloadPriorityClass (another team's work)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "urgent", "namespace": namespace, "labels": {
                QUEUE_LABEL: "team", "kueue.x-k8s.io/priority-class": "e2e-high"}},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "work", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}}}


def test_a_higher_priority_workload_preempts_the_job_which_resumes_and_completes(
        rest: Rest, kueue: Kueue, namespace: str, queue: dict[str, str],
        start_kueue_controller) -> None:
    for name, value in (("e2e-low", 10), ("e2e-high", 1000)):
        kueue.apply({"kind": "WorkloadPriorityClass", "metadata": {"name": name},
                     "value": value})
    cluster_queue(kueue, queue, namespace, cpu="1")
    cq = kueue.get("ClusterQueue", queue["cq"])
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    kueue.apply({"kind": "ClusterQueue", "metadata": {"name": queue["cq"]}, "spec": cq["spec"]})
    controller = start_kueue_controller()
    job = queued_job("modest", min_instance=2, max_instance=2, trainer_cpu="250m")
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "e2e-low"
    # its state on a volume that outlives the pods (docs/kubernetes.md), so the readmitted
    # master and pservers find it where the preempted ones left it
    job["spec"]["volumes"] = [STATE_VOLUME]
    job["spec"]["master"]["etcd-volume"] = job["spec"]["pserver"]["checkpoint-volume"] = "state"
    rest.create(job, namespace)
    wait_trainers(rest, namespace, "modest", 2)
    first = state_places(rest, namespace, "modest")

    # modest asks 900m (master and pservers 400m, trainers 500m) of 1 CPU: urgent's 800m
    # needs both of its Workloads preempted
    rest.create(high_priority_job(namespace, cpu="800m"), namespace)
    wait_until(lambda: evicted(kueue, namespace, "modest-servers"), 60,
               "Kueue evicts modest's master and pservers", interval=0.05)
    preempted = time.monotonic()
    wait_until(lambda: not live_trainers(rest, namespace, "modest"), 60,
               "modest's trainers deleted", interval=0.05)
    # at once (the Job watch, the 0.5 s status refresh), not at the 30 s resync
    assert time.monotonic() - preempted < 10
    wait_tj(rest, namespace, "modest",
            lambda t: t["status"]["message"].startswith("Kueue evicted workload modest-servers"),
            label="modest evicted by Kueue")
    wait_until(lambda: not rest.list("Pod", namespace, "edl.dev/job=modest"),
               60, "modest's trainers, master and pservers gone")
    urgent = wait_until(lambda: [p for p in rest.list("Pod", namespace, "job-name=urgent")
                                 if p["status"].get("phase") == "Running"], 60, "urgent runs")
    # the controller is SIGKILLed while modest waits; the urgent work ends meanwhile (as its
    # kubelet reports it): modest is readmitted, and the restarted controller resumes it
    controller.stop(signal.SIGKILL)
    pod = urgent[0]
    rest.merge("Pod", pod["metadata"]["name"], {"status": {"phase": "Succeeded",
               "containerStatuses": [{"name": "work", "image": "registry.k8s.io/pause:3.9",
                                      "ready": False, "restartCount": 0,
                                      "state": {"terminated": {"exitCode": 0,
                                                               "reason": "Completed"}}}]}},
               namespace, sub="status")
    wait_until(lambda: not evicted(kueue, namespace, "modest-servers"), 60,
               "modest's master and pservers readmitted")
    restart(start_kueue_controller, controller)
    wait_trainers(rest, namespace, "modest", 2)
    again = state_places(rest, namespace, "modest")
    assert again["uids"] != first["uids"], "the master and pservers were not recreated"
    assert again["places"] == first["places"], (first, again)
    finish(rest, namespace, "modest")
    wait_tj(rest, namespace, "modest", lambda t: t["status"]["state"] == "Succeeded")
    assert evictions(rest, namespace), "Kueue evicted the job (preemption)"
    assert all("Preempted" in e for e in evictions(rest, namespace)), evictions(rest, namespace)


def test_an_elastic_job_grows_to_its_queues_quota_with_borrowing_and_its_shrink_admits_another(
        rest: Rest, kueue: Kueue, namespace: str, queue: dict[str, str],
        start_kueue_controller) -> None:
    cohort, lender = f"co-{queue['cq']}", f"{queue['cq']}-lender"

    def member(name: str, limit: bool) -> dict[str, Any]:
        cpu: dict[str, Any] = {"name": "cpu", "nominalQuota": "1"}
        if limit:
            cpu["borrowingLimit"] = "1"  # 1 CPU of its own, at most 1 more from the cohort
        return {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": queue["flavor"], "resources": [
                    cpu, {"name": "memory", "nominalQuota": "64Gi"}]}]}]}}

    kueue.apply(member(lender, limit=False))
    try:
        kueue.apply(member(queue["cq"], limit=True))
        kueue.apply({"kind": "LocalQueue", "metadata": {"name": queue["lq"]},
                     "spec": {"clusterQueue": queue["cq"]}}, namespace)
        controller = start_kueue_controller()
        seen: list[tuple[int, int]] = []

        def within_admission(job: str, want: int) -> bool:
            running = len(trainer_pods(rest, namespace, job))
            admitted = admitted_counts(kueue, namespace).get(f"{job}-trainer", 0)
            seen.append((running, admitted))
            assert running <= max(admitted, 0), f"{running} trainers run, {admitted} admitted"
            return running == want and parallelism(rest, namespace, job) == want

        # 1 CPU own + 1 borrowed, less 400m for the master and pservers: 6 trainers of
        # 250m, though the cluster holds 12
        rest.create(queued_job("wide", min_instance=1, max_instance=12, trainer_cpu="250m"),
                    namespace)
        # the controller is SIGKILLed mid-growth and restarted: the growth goes on, through
        # Kueue, never beyond what it admitted
        wait_until(lambda: len(trainer_pods(rest, namespace, "wide")) >= 2, 120,
                   "wide growing")
        controller.stop(signal.SIGKILL)
        restart(start_kueue_controller, controller)
        wait_until(lambda: within_admission("wide", 6), 120, "wide grown to 6 trainers")
        rest.create(queued_job("next", min_instance=2, max_instance=2, trainer_cpu="250m"),
                    namespace)
        wait_tj(rest, namespace, "next", lambda t: "insufficient" in t["status"]["message"])
        # the owner narrows the elastic job: its shrink gives 1 CPU back, and next (900m)
        # fits
        rest.merge("TrainingJob", "wide", {"spec": {"trainer": {"max-instance": 2}}}, namespace)
        wait_trainers(rest, namespace, "next", 2)
        wait_until(lambda: within_admission("wide", 2), 60, "wide shrunk to 2 trainers")
        assert max(r for r, _ in seen) == 6
        assert not evictions(rest, namespace)  # every resize went through Kueue
    finally:
        rest.delete("TrainingJob", "wide", namespace)
        rest.delete("TrainingJob", "next", namespace)
        wait_until(lambda: not rest.list("Pod", namespace, "edl.dev/role=trainer"), 120,
                   "the trainers removed")
        kueue.delete("LocalQueue", queue["lq"], namespace)
        kueue.delete("ClusterQueue", queue["cq"])
        kueue.delete("ClusterQueue", lender)


def test_the_admission_policy_holds_edls_workload_writes_under_kueue(
        plane: ControlPlane, rest: Rest, kueue: Kueue, kueue_controller_kubeconfig: Path,
        namespace: str) -> None:
    """deploy/admission-policy.yaml, bound to the account `edl controller --kueue` runs
    as: a Workload edl does not own is neither created nor deleted with its token, nor
    one whose pods would run as an unlisted ServiceAccount; its own is written."""
    path = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
    # a real owner, of an installation no controller runs: with a made-up UID the garbage
    # collector may delete the owned Workload before the test's own DELETE (CI saw a 404)
    owner = trainingjob("t")
    owner["metadata"]["labels"] = {"edl.dev/installation": "nobody"}
    uid = rest.create(owner, namespace)["metadata"]["uid"]
    tj = {"apiVersion": "edl.dev/v1", "kind": "TrainingJob", "name": "t", "uid": uid,
          "controller": True}

    def workload(name: str, owned: bool, account: str = "") -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if owned:
            meta.update(labels={"edl.dev/job": "t"}, ownerReferences=[tj])
        pod: dict[str, Any] = {"containers": [{"name": "c", "image": "example.com/img"}]}
        if account:
            pod["serviceAccountName"] = account
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
                "spec": {"queueName": "team", "podSets": [
                    {"name": "master", "count": 1, "template": {"spec": pod}}]}}

    def call(method: str, url: str, body: Any = None) -> tuple[int, str]:
        return plane.call_as(kueue_controller_kubeconfig, method, url, body,
                             "application/json")

    wait_until(lambda: call("POST", path, workload("theirs", owned=False))[0] == 403, 30,
               "a Workload edl does not own refused")
    status = call("POST", path, workload("theirs", owned=False))
    assert "is not owned by a TrainingJob" in status[1], status
    status = call("POST", path, workload("t-servers", owned=True, account="admin"))
    assert status[0] == 403 and "may run only as" in status[1], status
    kueue.apply({"kind": "Workload", "metadata": {"name": "foreign"},
                 **{k: v for k, v in workload("foreign", owned=False).items()
                    if k == "spec"}}, namespace)
    status = call("DELETE", f"{path}/foreign")
    assert status[0] == 403 and "is not owned by a TrainingJob" in status[1], status
    assert call("POST", path, workload("t-servers", owned=True))[0] == 201
    assert call("DELETE", f"{path}/t-servers")[0] == 200
