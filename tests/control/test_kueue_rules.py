"""edl's side of Kueue's batch Job contract, without Kueue: the elastic opt-in on the
trainer Job, a Workload's state in Kueue's words, the Autoscaler leaving a size that
only Kueue's admission sets, and the trainer Job watch telling spec changes only."""

from __future__ import annotations

import asyncio

from edl.accounting.kueue import (
    ELASTIC_ANNOTATION,
    QUEUE_LABEL,
    admissible_trainers,
    cluster_queue_room,
    size_is_kueues,
    workload_words,
)
from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller
from edl.jobparser import JobParser
from edl.kube.kueue import ServersWorkloadStore, TrainerJobStore


def queued(manifest: dict, queue: str = "team-a") -> dict:
    manifest["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return manifest


def test_an_elastic_queued_job_opts_in_to_kueues_resizes_and_a_fixed_one_does_not(manifests):
    parser = JobParser()
    elastic = parser.parse_to_trainer(parser.validate(queued(manifests.training_job("e", 2, 6))))
    fixed = parser.parse_to_trainer(parser.validate(queued(manifests.training_job("f", 3, 3))))
    free = parser.parse_to_trainer(parser.validate(manifests.training_job("g", 2, 6)))
    assert elastic["metadata"]["annotations"] == {ELASTIC_ANNOTATION: "true"}
    assert not size_is_kueues(elastic)
    assert ELASTIC_ANNOTATION not in (fixed["metadata"].get("annotations") or {})
    assert size_is_kueues(fixed)
    assert ELASTIC_ANNOTATION not in (free["metadata"].get("annotations") or {})
    assert not size_is_kueues(free)


def condition(kind: str, status: str, message: str = "", reason: str = "") -> dict:
    return {"type": kind, "status": status, "message": message, "reason": reason}


def workload(name: str, created: str, *conditions: dict, queue: str = "") -> dict:
    status: dict = {"conditions": list(conditions)}
    if queue:
        status["admission"] = {"clusterQueue": queue}
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_a_workloads_state_is_said_in_kueues_words():
    pending = workload("job-a-1", "2026-12-03T10:00:00Z", condition(
        "QuotaReserved", "False", "couldn't assign flavors to pod set main: insufficient "
        "unused quota for cpu in flavor default, 500m more needed", "Pending"))
    assert workload_words([pending]) == (
        "Kueue: couldn't assign flavors to pod set main: insufficient unused quota for cpu "
        "in flavor default, 500m more needed")
    admitted = workload("job-a-1", "2026-12-03T10:00:00Z", condition("Admitted", "True"),
                        queue="cq")
    assert workload_words([admitted]) == "Kueue admitted workload job-a-1 to ClusterQueue cq"
    evicted = workload("job-a-1", "2026-12-03T10:00:00Z", condition("Admitted", "True"),
                       condition("Evicted", "True", "Preempted to accommodate a workload "
                                 "(UID: x) due to prioritization in the ClusterQueue"))
    assert workload_words([evicted]).startswith("Kueue evicted workload job-a-1: Preempted")
    # slices: the replaced one is Finished, the newest unfinished one speaks
    replaced = workload("job-a-1", "2026-12-03T10:00:00Z", condition("Finished", "True"))
    growth = workload("job-a-2", "2026-12-03T10:05:00Z", condition(
        "QuotaReserved", "False", "insufficient unused quota for cpu"))
    assert workload_words([growth, replaced]) == "Kueue: insufficient unused quota for cpu"
    assert workload_words([replaced]) == "" and workload_words([]) == ""


def test_the_autoscaler_never_resizes_a_trainer_job_whose_size_kueue_admitted(
        clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")

    async def scenario():
        autoscaler = Autoscaler(cluster, interval=1.0)
        controller = Controller(cluster, autoscaler, status_interval=1.0)
        tasks = [asyncio.create_task(autoscaler.run()), asyncio.create_task(controller.run())]
        await asyncio.sleep(0)
        cluster.create_training_job(queued(manifests.training_job("held", 2, 6, cpu="1")))
        cluster.create_training_job(manifests.training_job("free", 2, 6, cpu="1"))
        await asyncio.sleep(2)
        trainer = await cluster.get_trainer_job_by_name("default", "held-trainer")
        # a trainer Job Kueue sized (no elastic opt-in): as an older edl created it
        del trainer["metadata"]["annotations"][ELASTIC_ANNOTATION]
        trainer["spec"]["parallelism"] = 2
        cluster.store.replace("Job", trainer)
        await asyncio.sleep(20)
        held = await cluster.get_trainer_job_by_name("default", "held-trainer")
        free = await cluster.get_trainer_job_by_name("default", "free-trainer")
        for task in tasks:
            task.cancel()
        return held["spec"]["parallelism"], free["spec"]["parallelism"]

    held, free = clock.run(scenario())
    assert free == 6  # room for both: the free one grows
    assert held == 2  # the one Kueue sized keeps its admitted size


def test_the_trainer_job_watch_tells_spec_changes_not_status_writes():
    told: list[tuple[str, str]] = []
    store = TrainerJobStore(lambda namespace, job: told.append((namespace, job)))

    def job(generation: int, suspend: bool, active: int = 0) -> dict:
        return {"metadata": {"name": "a-trainer", "namespace": "ns", "generation": generation,
                             "labels": {"edl.dev/job": "a", "edl.dev/role": "trainer"}},
                "spec": {"suspend": suspend}, "status": {"active": active}}

    store.begin_replace()
    store.apply("ADDED", job(1, True))
    store.end_replace()
    assert told == [("ns", "a")]
    store.apply("MODIFIED", job(1, True, active=0))  # a status write
    assert told == [("ns", "a")]
    store.apply("MODIFIED", job(2, False))  # Kueue admitted it
    assert told == [("ns", "a")] * 2
    store.begin_replace()
    store.end_replace()  # gone while the watch was down: told on the relist
    assert told == [("ns", "a")] * 3


def test_the_servers_workload_watch_tells_admission_changes_not_kueues_messages():
    told: list[tuple[str, str]] = []
    store = ServersWorkloadStore()
    store.listeners.append(lambda namespace, job: told.append((namespace, job)))

    def workload(message: str, *conditions: tuple[str, str], role: str = "servers") -> dict:
        return {"metadata": {"name": "a-servers", "namespace": "ns",
                             "labels": {"edl.dev/job": "a", "edl.dev/role": role}},
                "status": {"admission": {"clusterQueue": "cq"} if conditions else None,
                           "conditions": [{"type": kind, "status": status, "message": message}
                                          for kind, status in conditions]}}

    store.begin_replace()
    store.apply("ADDED", workload("pending"))
    store.apply("ADDED", workload("x", ("Admitted", "True"), role="trainer"))  # not ours
    store.end_replace()
    assert told == [("ns", "a")]
    store.apply("MODIFIED", workload("still pending: 250m more needed"))  # Kueue's words
    assert told == [("ns", "a")]
    admitted = (("QuotaReserved", "True"), ("Admitted", "True"))
    store.apply("MODIFIED", workload("admitted", *admitted))
    store.apply("MODIFIED", workload("preempted", *admitted, ("Evicted", "True")))
    assert told == [("ns", "a")] * 3
    store.begin_replace()
    store.end_replace()  # gone while the watch was down: told on the relist
    assert told == [("ns", "a")] * 4


def cluster_queue(name: str, cpu: str, used: str = "0", cohort: str = "",
                  limit: str | None = None) -> dict:
    resource = {"name": "cpu", "nominalQuota": cpu}
    if limit is not None:
        resource["borrowingLimit"] = limit
    return {"metadata": {"name": name},
            "spec": {"cohortName": cohort, "resourceGroups": [{"flavors": [
                {"name": "f", "resources": [resource]}]}]},
            "status": {"flavorsReservation": [{"name": "f", "resources": [
                {"name": "cpu", "total": used}]}]}}


def test_a_cluster_queues_room_is_its_cohorts_unused_quota_up_to_its_borrowing_limit():
    alone = cluster_queue("a", "2", used="500m")
    assert cluster_queue_room(alone)["cpu"] == 1500
    limited = cluster_queue("a", "1", used="250m", cohort="c", limit="1")
    lender = cluster_queue("b", "4", cohort="c")
    # the cohort has 4.75 CPU unused, but a may hold at most 1 + 1
    assert cluster_queue_room(limited, [limited, lender])["cpu"] == 1750
    busy = cluster_queue("b", "4", used="3500m", cohort="c")
    assert cluster_queue_room(limited, [limited, busy])["cpu"] == 1250  # what b leaves
    assert admissible_trainers(1, {"cpu": 250, "memory": 256}, {"cpu": 1750, "memory": 10**6}) == 8
    assert admissible_trainers(3, {"cpu": 250, "memory": 0}, {"cpu": 100, "memory": 0}) == 3
