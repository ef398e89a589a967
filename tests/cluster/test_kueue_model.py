"""The in-process model of Kueue (`edl.cluster.inproc.kueue`, `.queueing`): admission,
quota with cohort borrowing, preemption, and edl's Controller and Autoscaler under it."""

from __future__ import annotations

import asyncio

from edl.cluster.inproc.kueue import ClusterQueue, KueueModel, ResourceFlavor, Workload
from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller


def workload(job: str, queue: str, cpu_per_pod: int, count: int, priority: int = 0,
             created: float = 0.0) -> Workload:
    return Workload("ns", job, queue, priority, created, {"cpu": cpu_per_pod, "memory": 0},
                    count)


def test_a_cluster_queue_borrows_what_its_cohort_leaves_unused_up_to_its_limit():
    model = KueueModel()
    model.cluster_queues["a"] = ClusterQueue("a", "f", {"cpu": 2000}, cohort="c",
                                             borrowing_limit={"cpu": 1000})
    model.cluster_queues["b"] = ClusterQueue("b", "f", {"cpu": 2000}, cohort="c")
    model.workloads[("ns", "big")] = workload("big", "a", 1000, 3)  # 1 CPU borrowed
    model.workloads[("ns", "bigger")] = workload("bigger", "a", 1000, 1, created=1.0)
    decided = model.schedule()
    assert [w.job for w in decided.admitted] == ["big"]
    assert model.room("a") == {"cpu": 0, "memory": 0}
    assert model.workloads[("ns", "bigger")].message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in "
        "flavor f, 1000m more needed")
    # b's own use shrinks what a may borrow; a shrink of a gives quota back at once
    model.workloads[("ns", "mine")] = workload("mine", "b", 1000, 2, created=2.0)
    assert [w.job for w in model.schedule().admitted] == []  # b lent 1 CPU: 1 left for it
    assert model.resize(("ns", "big"), 2)
    assert [w.job for w in model.schedule().admitted] == ["bigger"]  # the older one first
    assert model.workloads[("ns", "mine")].message.endswith("1000m more needed")


def test_a_higher_priority_workload_preempts_the_lowest_and_newest_first():
    model = KueueModel()
    model.cluster_queues["q"] = ClusterQueue("q", "f", {"cpu": 3000},
                                             preempt_lower_priority=True)
    model.workloads[("ns", "old")] = workload("old", "q", 1000, 1, priority=10)
    model.workloads[("ns", "new")] = workload("new", "q", 1000, 2, priority=10, created=1.0)
    model.schedule()
    model.workloads[("ns", "urgent")] = workload("urgent", "q", 1000, 2, priority=100,
                                                 created=2.0)
    decided = model.schedule()
    assert [w.job for w in decided.evicted] == ["new"]
    assert [w.job for w in decided.admitted] == ["urgent"]
    assert model.words(("ns", "new")).startswith("Kueue evicted workload new: Preempted")
    # without the preemption rule it waits instead
    model.cluster_queues["q"] = ClusterQueue("q", "f", {"cpu": 3000})
    model.workloads[("ns", "later")] = workload("later", "q", 1000, 1, priority=1000,
                                                created=3.0)
    assert not model.schedule().evicted
    assert model.words(("ns", "later")).startswith("Kueue: couldn't assign flavors")


def queued(manifest: dict) -> dict:
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    return manifest


def test_edl_under_the_model_queues_the_second_job_and_places_trainers_by_flavor(
        clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=1, cpu="16")
    taint = {"key": "pool", "value": "gpu", "effect": "NoSchedule"}
    for index in range(2):
        cluster.add_node(f"gpu-{index}", {"cpu": "16", "memory": "32Gi"},
                         labels={"pool": "gpu"}, taints=[taint])
    cluster.create_resource_flavor(ResourceFlavor("gpu", {"pool": "gpu"},
                                                  ({**taint, "operator": "Equal"},)))
    # a job asks 5.6 CPU: master 600m, a pserver 1 CPU (its servers' Workload), 2 trainers
    # of 2 CPU; 1 CPU is left: not even the second job's master and pservers fit
    cluster.create_cluster_queue(ClusterQueue("cq", "gpu", {"cpu": 6600, "memory": 10**6}))
    cluster.create_local_queue("default", "team", "cq")

    async def scenario():
        autoscaler = Autoscaler(cluster, interval=1.0)
        controller = Controller(cluster, autoscaler, status_interval=1.0)
        tasks = [asyncio.create_task(autoscaler.run()), asyncio.create_task(controller.run())]
        await asyncio.sleep(0)
        cluster.create_training_job(queued(manifests.training_job("first", 2, 2, cpu="2")))
        await asyncio.sleep(5)
        cluster.create_training_job(queued(manifests.training_job("second", 2, 2, cpu="2")))
        await asyncio.sleep(10)
        waiting = cluster.get_training_job("default", "second")["status"]["message"]
        counts = (cluster.trainer_counts("default", "first").running,
                  cluster.trainer_counts("default", "second").running)
        nodes = {p["spec"].get("nodeName") for p in cluster.list_pods("default")
                 if p["metadata"]["labels"].get("edl.dev/job") == "first"}
        second = [p for p in cluster.list_pods("default")
                  if p["metadata"]["labels"].get("edl.dev/job") == "second"]
        cluster.delete_training_job("default", "first")
        await asyncio.sleep(15)
        after = cluster.trainer_counts("default", "second").running
        for task in tasks:
            task.cancel()
        return waiting, counts, nodes, second, after

    waiting, counts, nodes, second, after = clock.run(scenario())
    assert counts == (2, 0)
    assert waiting.startswith("master and pservers waiting for admission: Kueue: ")
    assert "insufficient unused quota for cpu" in waiting
    assert not second  # nothing of the second job runs, not even its master
    # every pod of the first job, master and pserver included, on the flavor's nodes only
    assert nodes and nodes <= {"gpu-0", "gpu-1"}, nodes
    assert after == 2  # admitted once the first job's quota came back


def test_an_elastic_job_under_the_model_grows_to_what_its_cluster_queue_admits(
        clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    cluster.create_resource_flavor(ResourceFlavor("default"))
    cluster.create_cluster_queue(ClusterQueue("cq", "default", {"cpu": 6600, "memory": 10**6}))
    cluster.create_local_queue("default", "team", "cq")

    async def scenario():
        autoscaler = Autoscaler(cluster, interval=1.0)
        controller = Controller(cluster, autoscaler, status_interval=1.0)
        tasks = [asyncio.create_task(autoscaler.run()), asyncio.create_task(controller.run())]
        await asyncio.sleep(0)
        cluster.create_training_job(queued(manifests.training_job("wide", 1, 10, cpu="1")))
        await asyncio.sleep(30)
        trainer = await cluster.get_trainer_job_by_name("default", "wide-trainer")
        running = cluster.trainer_counts("default", "wide").running
        for task in tasks:
            task.cancel()
        return trainer["spec"]["parallelism"], running

    # 6.6 CPU of quota, less 1.6 for the master and pserver: 5 trainers, though the nodes
    # hold 30
    assert clock.run(scenario()) == (5, 5)
