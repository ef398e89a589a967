"""`edl plan` on a snapshot of a cluster run by Kueue: a queued job Kueue holds is not
planned (its reason quotes Kueue), and an admitted elastic job is planned within what
its ClusterQueue, with its cohort, can still admit."""

from __future__ import annotations

import json

from click.testing import CliRunner

from edl.cli.main import cli
from edl.snapshot import parse_snapshot, plan_inputs

QUEUE = {"kueue.x-k8s.io/queue-name": "team"}
SELECTOR = {"matchLabels": {"edl.dev/job": "wide", "edl.dev/role": "trainer"}}


def _training_job(name: str, lo: int, hi: int) -> dict:
    return {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ns", "labels": QUEUE},
            "spec": {"trainer": {"entrypoint": "python train.py", "min-instance": lo,
                                 "max-instance": hi,
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}}


def _trainer_job(name: str, parallelism: int, suspend: bool) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-trainer", "namespace": "ns", "uid": f"uid-{name}",
                         "labels": QUEUE,
                         "annotations": {"kueue.x-k8s.io/elastic-job": "true"}},
            "spec": {"parallelism": parallelism, "suspend": suspend,
                     "selector": {"matchLabels": {"edl.dev/job": name,
                                                  "edl.dev/role": "trainer"}}}}


def _workload(name: str, job: str, count: int | None, message: str = "") -> dict:
    status: dict = {"conditions": [{"type": "QuotaReserved", "status": "False",
                                    "message": message}]}
    if count is not None:
        status = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": count}]},
            "conditions": [{"type": "Admitted", "status": "True"}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {"kueue.x-k8s.io/job-uid": f"uid-{job}"}},
            "spec": {"queueName": "team"}, "status": status}


def _cluster_queue(name: str, nominal: str, used: str, limit: str | None = None) -> dict:
    cpu: dict = {"name": "cpu", "nominalQuota": nominal}
    if limit is not None:
        cpu["borrowingLimit"] = limit
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"cohortName": "research", "resourceGroups": [{"flavors": [
                {"name": "default", "resources": [cpu, {"name": "memory",
                                                        "nominalQuota": "64Gi"}]}]}]},
            "status": {"flavorsReservation": [{"name": "default", "resources": [
                {"name": "cpu", "total": used}]}]}}


def _snapshot() -> str:
    node = {"kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}}
    pods = [{"kind": "Pod", "metadata": {"name": f"wide-{i}", "namespace": "ns",
                                         "labels": SELECTOR["matchLabels"]},
             "spec": {"nodeName": "n1", "containers": [
                 {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
             "status": {"phase": "Running"}} for i in range(4)]
    items = [node, *pods,
             _training_job("wide", 2, 20), _trainer_job("wide", 4, suspend=False),
             _workload("job-wide-trainer", "wide", 4),
             _training_job("held", 2, 4), _trainer_job("held", 2, suspend=True),
             _workload("job-held-trainer", "held", None,
                       "insufficient unused quota for cpu in flavor default, 1 more needed"),
             _training_job("fresh", 2, 4),
             # cq: 6 CPU, 5 used (wide's 4 trainers and its master and pservers), may
             # borrow 2; the lender has 3 of 4 unused: cq can admit 3 more, not 20
             _cluster_queue("cq", "6", "5", limit="2"), _cluster_queue("lender", "4", "1"),
             {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": "team", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}}]
    servers = _workload("fresh-servers", "none", None, "insufficient unused quota for cpu")
    servers["metadata"]["labels"] = {}
    items.append(servers)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def test_an_admitted_elastic_job_is_planned_within_its_cluster_queue_with_borrowing():
    inputs = plan_inputs(parse_snapshot(_snapshot()))
    (wide,) = inputs.jobs
    assert (wide.name, wide.max_instance) == ("wide", 7)  # 4 admitted + 3 more, not 20


def test_jobs_kueue_holds_are_not_planned_and_say_why_in_kueues_words(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(_snapshot())
    result = CliRunner().invoke(cli, ["plan", "-o", "json", str(state)])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["jobs"]}
    assert rows["held"]["target"] is None
    assert rows["held"]["reason"] == (
        "trainer Job suspended (queued by Kueue: starting it is Kueue's call): Kueue: "
        "insufficient unused quota for cpu in flavor default, 1 more needed")
    assert rows["fresh"]["reason"] == ("master and pservers waiting for admission: Kueue: "
                                       "insufficient unused quota for cpu")
    assert rows["wide"]["target"] <= 7
