"""`scale_trainer_job`: the in-process cluster removes the named trainers, and no others."""

from __future__ import annotations

import asyncio

import pytest

from edl.cluster.port import ConflictError, VictimScaling


def trainers(cluster, job="j"):
    return {
        pod.name: (pod.node, pod.terminating)
        for pod in cluster.pod_records()
        if pod.role == "trainer" and pod.job == job
    }


def test_in_process_cluster_offers_victim_scaling(cluster_factory):
    assert isinstance(cluster_factory(), VictimScaling)


def test_named_trainers_leave_and_the_job_controller_picks_none(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=3, cpu="8", termination=5.0)

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 6, "2"))
        await asyncio.sleep(5)
        listed = await cluster.trainer_pods({"metadata": {"name": "j", "namespace": "default"}})
        assert {(p.name, p.node) for p in listed} == {
            (name, node) for name, (node, _) in trainers(cluster).items()
        }
        # the two oldest, which Kubernetes' Job controller would keep
        victims = sorted(p.name for p in listed)[:2]
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = 4
        stored = await cluster.scale_trainer_job(job, victims)
        assert stored["spec"]["parallelism"] == 4
        await asyncio.sleep(0)  # the Job controller reconciles
        return victims, trainers(cluster)

    victims, after = clock.run(scenario())
    assert {name for name, (_, leaving) in after.items() if leaving} == set(victims)
    assert sum(1 for _, leaving in after.values() if not leaving) == 4


def test_a_stale_scale_conflicts_before_any_pod_is_touched(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="8")

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 4, "2"))
        await asyncio.sleep(5)
        stale = await cluster.get_trainer_job_by_name("default", "j-trainer")
        fresh = await cluster.get_trainer_job_by_name("default", "j-trainer")
        await cluster.update_trainer_job(fresh)  # someone else writes first
        stale["spec"]["parallelism"] = 3
        with pytest.raises(ConflictError):
            await cluster.scale_trainer_job(stale, [next(iter(trainers(cluster)))])
        await asyncio.sleep(0)
        return trainers(cluster)

    after = clock.run(scenario())
    assert len(after) == 4 and not any(leaving for _, leaving in after.values())


def test_pods_of_other_owners_are_never_deleted(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="8")

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 2, "1"))
        await cluster.create_job(manifests.batch_job("k-trainer", 2, "1"))
        await asyncio.sleep(5)
        others = list(trainers(cluster, "k"))
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        await cluster.scale_trainer_job(job, [*others, "no-such-pod"])
        await asyncio.sleep(0)
        return trainers(cluster, "k")

    after = clock.run(scenario())
    assert len(after) == 2 and not any(leaving for _, leaving in after.values())
