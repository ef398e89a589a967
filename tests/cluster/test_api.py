"""API-server behaviour of the in-process control plane: versions, conflicts, errors, accounting."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edl.accounting import inquire_resource
from edl.cluster.inproc.clock import VirtualClock
from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner, Uniform
from edl.cluster.port import AlreadyExistsError, Cluster, ConflictError, NotFoundError


def test_in_process_cluster_satisfies_the_port(clock, cluster_factory):
    assert isinstance(cluster_factory(), Cluster)


def test_stale_update_conflicts_and_fresh_one_succeeds(clock, cluster_factory, manifests):
    cluster = cluster_factory()

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 1, "1"))
        first = await cluster.get_trainer_job_by_name("default", "j-trainer")
        second = await cluster.get_trainer_job_by_name("default", "j-trainer")
        first["spec"]["parallelism"] = 2
        stored = await cluster.update_trainer_job(first)
        assert stored["metadata"]["generation"] == 2
        second["spec"]["parallelism"] = 3
        with pytest.raises(ConflictError) as conflict:
            await cluster.update_trainer_job(second)
        assert "j-trainer" in str(conflict.value)
        fresh = await cluster.get_trainer_job_by_name("default", "j-trainer")
        fresh["spec"]["parallelism"] = 3
        await cluster.update_trainer_job(fresh)
        await asyncio.sleep(1)
        return await cluster.get_trainer_job_by_name("default", "j-trainer")

    job = clock.run(scenario())
    assert job["spec"]["parallelism"] == 3
    assert job["status"]["active"] == 3


def test_missing_and_duplicate_objects(clock, cluster_factory, manifests):
    cluster = cluster_factory()

    async def scenario():
        with pytest.raises(NotFoundError):
            await cluster.get_replica_set("default", "nope")
        with pytest.raises(NotFoundError):
            await cluster.delete_trainer_job("default", "nope")
        with pytest.raises(NotFoundError):
            await cluster.update_training_job_status("default", "nope", {"state": "Running"})
        await cluster.create_replica_set(manifests.replica_set("rs", 1, "1"))
        with pytest.raises(AlreadyExistsError):
            await cluster.create_replica_set(manifests.replica_set("rs", 1, "1"))

    clock.run(scenario())


def test_status_writes_do_not_bump_generation(clock, cluster_factory):
    cluster = cluster_factory()
    created = cluster.create_training_job(
        {"apiVersion": "edl.dev/v1", "kind": "TrainingJob", "metadata": {"name": "t"}, "spec": {}}
    )

    async def scenario():
        await cluster.update_training_job_status("default", "t", {"state": "Running"})

    clock.run(scenario())
    job = cluster.get_training_job("default", "t")
    assert job["status"] == {"state": "Running"}
    assert job["metadata"]["generation"] == created["metadata"]["generation"]
    assert job["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]


def test_callers_get_copies(clock, cluster_factory, manifests):
    cluster = cluster_factory()

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("rs", 1, "1"))
        mine = await cluster.get_replica_set("default", "rs")
        mine["spec"]["replicas"] = 9
        return await cluster.get_replica_set("default", "rs")

    assert clock.run(scenario())["spec"]["replicas"] == 1


def node_objects(cluster: InProcessCluster) -> list[dict]:
    return [
        {
            "metadata": {"name": node.name, "labels": dict(node.labels)},
            "status": {
                "allocatable": {
                    "cpu": f"{node.cpu_milli}m",
                    "memory": str(node.memory_mega * 1_000_000),
                }
            },
        }
        for node in cluster.nodes.nodes
    ]


operations = st.lists(
    st.tuples(
        st.sampled_from(["rs", "job", "pod", "scale", "delete-pod", "wait"]),
        st.integers(0, 6),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.sampled_from(["spread", "binpack"]))
def test_incremental_accounting_matches_inquire_resource(ops, placement):
    """The plane's O(1) ClusterResource equals accounting over a full listing, no node is
    over-committed, and once settled no waiting pod would fit anywhere."""
    clock = VirtualClock()
    try:
        pod_runner = SimulatedPodRunner(
            clock, random.Random(3), start_latency=Uniform(0.5, 3), other_termination=Fixed(2)
        )
        cluster = InProcessCluster(clock, pod_runner, placement=placement)
        for index in range(3):
            cluster.add_node(f"n{index}", {"cpu": "6", "memory": "16Gi"})
        cpus = ["500m", "1", "2", "3"]

        async def scenario():
            for step, (op, number, size) in enumerate(ops):
                name = f"o{step}"
                cpu = cpus[size]
                if op == "rs":
                    await cluster.create_replica_set(
                        {
                            "metadata": {"name": name},
                            "spec": {
                                "replicas": number,
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {"name": "c", "resources": {"limits": {"cpu": cpu}}}
                                        ]
                                    }
                                },
                            },
                        }
                    )
                elif op == "job":
                    await cluster.create_job(
                        {
                            "metadata": {"name": name},
                            "spec": {
                                "parallelism": number,
                                "template": {
                                    "metadata": {"labels": {"edl.dev/role": "trainer"}},
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "c",
                                                "resources": {"requests": {"cpu": cpu}},
                                            }
                                        ]
                                    },
                                },
                            },
                        }
                    )
                elif op == "pod":
                    cluster.create_pod(
                        {
                            "metadata": {"name": name},
                            "spec": {
                                "containers": [
                                    {"name": "c", "resources": {"requests": {"cpu": cpu}}}
                                ]
                            },
                        }
                    )
                elif op == "scale":
                    owners = [key for key in cluster._owners if cluster.store.peek(*key)]
                    if owners:
                        kind, namespace, owner = owners[number % len(owners)]
                        cluster.scale(kind, namespace, owner, size)
                elif op == "delete-pod":
                    pods = list(cluster.pod_records())
                    if pods:
                        victim = pods[number % len(pods)]
                        cluster.delete_pod(victim.namespace, victim.name)
                else:
                    await asyncio.sleep(number * 0.7)
                await asyncio.sleep(0)
                expected = inquire_resource(node_objects(cluster), cluster.list_pods())
                assert await cluster.inquiry_resource() == expected
                sample = cluster.sample()
                running = [p for p in cluster.pod_records() if p.phase == "Running"]
                assert sample.running_cpu_request_milli == sum(
                    p.resources.cpu_request_milli for p in running
                )
                for node in cluster.nodes.nodes:
                    assert node.free_cpu_milli >= 0
                for _ in range(3):  # let the controllers and the scheduler settle
                    await asyncio.sleep(0)
                for pod in cluster.pod_records():  # work-conserving: no waiting pod fits
                    if pod.node is None:
                        res = pod.resources
                        assert cluster.nodes.find(
                            res.cpu_request_milli, res.memory_request_mega, res.gpu_request
                        ) is None

        clock.run(scenario())
    finally:
        clock.close()
