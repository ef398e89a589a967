"""The servers' Workload without Kueue: what edl asks Kueue to count for a queued job's
master and pservers, how it reads the admission (placement, eviction), and the status
that gives an evicted Workload's quota back. The real Kueue: tests/e2e/test_kueue.py."""

from __future__ import annotations

from edl.accounting import pod_request
from edl.accounting.kueue import PRIORITY_LABEL, QUEUE_LABEL
from edl.accounting.kueue_servers import admission_of, place, released_status, servers_workload
from edl.jobparser import JobParser


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
