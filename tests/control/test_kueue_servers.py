"""The servers' Workload without Kueue: what edl asks Kueue to count for a queued job's
master and pservers, how it reads the admission (placement, eviction), and the status
that gives an evicted Workload's quota back. The real Kueue: tests/e2e/test_kueue.py."""

from __future__ import annotations

from datetime import UTC, datetime

from edl.accounting import pod_request
from edl.accounting.kueue import PRIORITY_LABEL, QUEUE_LABEL
from edl.accounting.kueue_servers import (
    ServersAdmission,
    admission_of,
    place,
    released_status,
    servers_workload,
)
from edl.control.queue_gate import servers_gate
from edl.jobparser import JobParser
from edl.kube.kueue import GRACE_SLACK_S, still_stopping


def _workload(manifests, priority: int | None = 10) -> dict:
    parser = JobParser()
    body = manifests.training_job("tj", 2, 4)
    body["metadata"].update(uid="u-1", labels={QUEUE_LABEL: "team", PRIORITY_LABEL: "low"})
    job = parser.validate(body)
    return servers_workload(body, parser.parse_to_master(job), parser.parse_to_pserver(job),
                            priority)


def test_the_workload_counts_the_master_and_every_pserver_at_the_jobs_priority(manifests):
    workload = _workload(manifests)
    spec = workload["spec"]
    assert workload["metadata"]["name"] == "tj-servers"
    assert workload["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert spec["queueName"] == "team" and spec["priority"] == 10
    assert spec["priorityClassRef"]["name"] == "low"
    counts = {p["name"]: p["count"] for p in spec["podSets"]}
    pserver = JobParser().validate(manifests.training_job("tj", 2, 4)).spec.pserver
    assert counts == {"master": 1, "pserver": pserver.min_instance}
    master = pod_request({"spec": spec["podSets"][0]["template"]["spec"]})
    assert master.cpu_request_milli > 0  # the requests Kueue charges are the pods' own


def _condition(kind: str, status: str, **more: str) -> dict:
    return {"type": kind, "status": status, **more}


def test_admitted_places_evicted_releases_and_pending_says_why_in_kueues_words():
    flavor = {"spec": {"nodeLabels": {"pool": "gpu"},
                       "tolerations": [{"key": "gpu", "operator": "Exists"}]}}
    admission = {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "master", "flavors": {"cpu": "f"}, "count": 1}]}
    admitted = {"metadata": {"name": "tj-servers", "generation": 1}, "status": {
        "admission": admission,
        "conditions": [_condition("QuotaReserved", "True"), _condition("Admitted", "True")]}}
    state = admission_of(admitted, {"f": flavor})
    assert state.admitted and not state.evicted
    replica_set = {"spec": {"template": {"spec": {"tolerations": [{"key": "x"}]}}}}
    placed = place(replica_set, state.placement["master"])["spec"]["template"]["spec"]
    assert placed["nodeSelector"] == {"pool": "gpu"}
    assert placed["tolerations"] == [{"key": "x"}, {"key": "gpu", "operator": "Exists"}]

    evicted = {**admitted, "status": {**admitted["status"], "conditions": [
        *admitted["status"]["conditions"],
        _condition("Evicted", "True", reason="Preempted", message="Preempted by urgent")]}}
    state = admission_of(evicted, {})
    assert state.evicted and not state.admitted
    assert state.words == "Kueue evicted workload tj-servers: Preempted by urgent"
    released = released_status(evicted)
    assert released["admission"] is None
    kinds = {c["type"]: (c["status"], c["reason"]) for c in released["conditions"]}
    assert kinds == {"QuotaReserved": ("False", "PendingEvaluation"),
                     "Admitted": ("False", "NoReservation"), "Evicted": ("True", "Preempted"),
                     "Requeued": ("True", "Preempted")}
    # released, the Evicted condition stays until Kueue readmits: edl waits, it does not
    # evict again
    state = admission_of({**evicted, "status": released}, {})
    assert not state.evicted and not state.admitted

    pending = {"metadata": {"name": "tj-servers"}, "status": {"conditions": [_condition(
        "QuotaReserved", "False", message="insufficient unused quota for cpu")]}}
    assert admission_of(pending, {}).words == "Kueue: insufficient unused quota for cpu"


class _Evicting:
    """A cluster whose servers' Workload Kueue evicted: records what edl deletes, in
    order, and says pservers still stop for the first `stopping` asks."""

    kueue = True

    def __init__(self, stopping: int) -> None:
        self.stopping, self.done = stopping, []

    async def servers_admission(self, job, master, pserver):
        return ServersAdmission(False, evicted=True, words="Kueue evicted workload tj-servers")

    async def pservers_stopping(self, namespace, name):
        self.stopping -= 1
        return self.stopping >= 0

    async def release_servers(self, namespace, name):
        self.done.append("release")

    def __getattr__(self, verb):  # delete_trainer_job, delete_replica_set, delete_service
        async def delete(namespace, name):
            self.done.append(name)
        return delete


async def test_an_evicted_jobs_master_goes_only_after_its_pservers_and_then_the_quota(manifests):
    """A pserver's final checkpoint is registered in the master pod's etcd: deleting the
    master with the pservers lost it (tests/node/test_kueue.py saw one start empty)."""
    parser = JobParser()
    body = manifests.training_job("tj", 2, 4)
    body["metadata"]["labels"] = {QUEUE_LABEL: "team"}
    job = parser.validate(body)
    cluster = _Evicting(stopping=2)
    for _ in range(2):  # the pservers still stop: trainers and pservers go, the master stays
        gate = await servers_gate(cluster, parser, job, running=True)
        assert not gate.open and "master kept until the pservers" in gate.message
        assert "tj-master" not in cluster.done and "release" not in cluster.done
    gate = await servers_gate(cluster, parser, job, running=False)
    assert not gate.open and gate.message.startswith("Kueue evicted workload tj-servers")
    assert cluster.done[:2] == ["tj-trainer", "tj-pserver"]
    assert cluster.done[-3:] == ["tj-master", "tj-master", "release"]  # ReplicaSet, Service


def test_a_pod_still_stops_until_it_ends_or_is_past_its_grace_period():
    now = 1_000_000.0

    def at(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")

    assert still_stopping({"status": {"phase": "Running"}}, now)
    assert not still_stopping({"status": {"phase": "Succeeded"}}, now)
    deleting = {"status": {"phase": "Running"}, "metadata": {"deletionTimestamp": at(now + 30)}}
    assert still_stopping(deleting, now)
    deleting["metadata"]["deletionTimestamp"] = at(now - GRACE_SLACK_S - 1)
    assert not still_stopping(deleting, now)  # a pod on a lost node blocks no longer
