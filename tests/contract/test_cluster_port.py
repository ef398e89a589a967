"""The `Cluster` port's contract, one set of test bodies for every implementation.

What the Controller and Autoscaler rely on, stated once: children are created,
read, replaced and deleted with Kubernetes' error semantics (409 AlreadyExists,
409 Conflict on a stale resourceVersion, 404); trainer pods are counted;
room is summed; TrainingJob events arrive in order (existing jobs first); and a
shrink can name which trainers leave.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER, child_name, trainer_job_name
from edl.cluster.port import (
    AlreadyExistsError,
    ConflictError,
    NotFoundError,
    VictimScaling,
)
from polling import eventually

NS = "default"


def ref(name: str) -> Any:
    """What the port's job arguments need of a TrainingJob: its metadata."""
    return SimpleNamespace(metadata=SimpleNamespace(namespace=NS, name=name))


def trainer_job(job: str, parallelism: int) -> dict[str, Any]:
    labels = {LABEL_JOB: job, LABEL_ROLE: ROLE_TRAINER}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": trainer_job_name(job), "namespace": NS, "labels": labels},
        "spec": {
            "parallelism": parallelism, "backoffLimit": 6,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "trainer", "image": "edl",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            },
        },
    }


def replica_set(job: str, role: str) -> dict[str, Any]:
    labels = {LABEL_JOB: job, LABEL_ROLE: role}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": child_name(job, role), "namespace": NS, "labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": role, "image": "edl"}]}}},
    }


def training_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "edl", "trainer": {"entrypoint": "python train.py",
                                             "min-instance": 1, "max-instance": 2}},
    }


class Recorder:
    """A TrainingJobHandler that keeps (event, name) in arrival order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def on_add(self, obj: dict[str, Any]) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    async def on_update(self, obj: dict[str, Any]) -> None:
        self.events.append(("update", obj["metadata"]["name"]))

    async def on_del(self, obj: dict[str, Any]) -> None:
        self.events.append(("del", obj["metadata"]["name"]))


async def test_a_trainer_job_is_created_read_and_not_created_twice(harness) -> None:
    cluster = harness.cluster
    stored = await cluster.create_job(trainer_job("a", 2))
    assert stored["metadata"]["resourceVersion"]
    by_job = await cluster.get_trainer_job(ref("a"))
    by_name = await cluster.get_trainer_job_by_name(NS, trainer_job_name("a"))
    assert by_job["spec"]["parallelism"] == by_name["spec"]["parallelism"] == 2
    # Kubernetes applies (converges) an existing child; in-process refuses: never two
    with contextlib.suppress(AlreadyExistsError):
        await cluster.create_job(trainer_job("a", 2))
    assert (await cluster.get_trainer_job(ref("a")))["metadata"]["uid"] == stored["metadata"]["uid"]
    with pytest.raises(NotFoundError):
        await cluster.get_trainer_job(ref("never-created"))


async def test_a_stale_update_conflicts_and_a_fresh_one_lands(harness) -> None:
    cluster = harness.cluster
    await cluster.create_job(trainer_job("b", 1))
    first = await cluster.get_trainer_job(ref("b"))
    first["spec"]["parallelism"] = 3
    await cluster.update_trainer_job(first)
    stale = dict(first)  # still carries the resourceVersion read before the update
    stale["spec"] = {**first["spec"], "parallelism": 5}
    with pytest.raises(ConflictError):
        await cluster.update_trainer_job(stale)
    assert (await cluster.get_trainer_job(ref("b")))["spec"]["parallelism"] == 3


async def test_deleted_children_are_gone_and_deleting_twice_is_not_found(harness) -> None:
    cluster = harness.cluster
    await cluster.create_job(trainer_job("c", 1))
    await cluster.create_replica_set(replica_set("c", "pserver"))
    rs = await cluster.get_replica_set(NS, child_name("c", "pserver"))
    assert rs["metadata"]["labels"][LABEL_ROLE] == "pserver"
    await cluster.delete_trainer_job(NS, trainer_job_name("c"))
    await cluster.delete_replica_set(NS, child_name("c", "pserver"))
    with pytest.raises(NotFoundError):
        await cluster.get_trainer_job(ref("c"))
    with pytest.raises(NotFoundError):
        await cluster.get_replica_set(NS, child_name("c", "pserver"))
    with pytest.raises(NotFoundError):
        await cluster.delete_trainer_job(NS, trainer_job_name("c"))
    with pytest.raises(NotFoundError):
        await cluster.delete_replica_set(NS, child_name("c", "pserver"))


async def test_room_is_summed_over_nodes_and_running_trainers(harness) -> None:
    cluster = harness.cluster
    await harness.add_node("n1", "8", "16Gi")
    await harness.add_node("n2", "4", "8Gi")
    total = await eventually(
        lambda: _when_total(cluster, 12000), 30, "both nodes counted"
    )
    assert total.cpu_request_milli == 0
    await cluster.create_job(trainer_job("d", 2))
    await harness.run_trainers("d", ["n1", "n2"])
    loaded = await eventually(lambda: _when_requested(cluster, 2000), 30, "trainer requests")
    assert loaded.cpu_total_milli == 12000
    assert loaded.memory_total_mega > loaded.memory_request_mega > 0


async def test_trainer_pods_are_counted_per_job(harness) -> None:
    cluster = harness.cluster
    await harness.add_node("n1", "8", "16Gi")
    assert (await cluster.job_pods(ref("e")))[:3] == (0, 0, 0)
    await cluster.create_job(trainer_job("e", 3))
    await harness.run_trainers("e", ["n1", "n1", "n1"])
    counts = await eventually(lambda: _when_running(cluster, "e", 3), 30, "3 running trainers")
    assert counts.total == 3 and counts.pending == 0
    assert (await cluster.job_pods(ref("other"))).total == 0


async def test_training_job_events_arrive_in_order_existing_first(harness) -> None:
    await harness.submit(training_job("before"))
    probe = Recorder()
    stop_probe = harness.cluster.watch_training_jobs(probe)
    await eventually(lambda: ("add", "before") in probe.events, 30, "the job seen at all")
    stop_probe()
    recorder = Recorder()  # subscribes after the job exists: it must still hear of it first
    unsubscribe = harness.cluster.watch_training_jobs(recorder)
    try:
        await eventually(lambda: ("add", "before") in recorder.events, 30, "existing job added")
        await harness.submit(training_job("during"))
        await eventually(lambda: ("add", "during") in recorder.events, 30, "new job added")
        await harness.remove(NS, "during")
        await eventually(lambda: ("del", "during") in recorder.events, 30, "job deleted")
        adds = [name for event, name in recorder.events if event == "add"]
        assert adds.index("before") < adds.index("during")
        assert recorder.events.index(("add", "during")) < recorder.events.index(("del", "during"))
    finally:
        unsubscribe()


async def test_status_of_a_missing_training_job_is_not_found(harness) -> None:
    with pytest.raises(NotFoundError):
        await harness.cluster.update_training_job_status(NS, "ghost", {"state": "Running"})


async def test_a_shrink_can_name_the_trainers_that_leave(harness) -> None:
    cluster = harness.cluster
    assert isinstance(cluster, VictimScaling)
    await harness.add_node("n1", "8", "16Gi")
    await harness.add_node("n2", "8", "16Gi")
    await cluster.create_job(trainer_job("f", 3))
    await harness.run_trainers("f", ["n1", "n2", "n1"])
    pods = await eventually(lambda: _when_pods(cluster, "f", 3), 30, "three trainer pods")
    assert all(pod.node for pod in pods)
    victim = pods[0].name
    job = await cluster.get_trainer_job(ref("f"))
    job["spec"]["parallelism"] = 2
    stored = await cluster.scale_trainer_job(job, [victim])
    assert stored["spec"]["parallelism"] == 2
    left = await eventually(lambda: _when_pods(cluster, "f", 2), 30, "the victim gone")
    assert victim not in {pod.name for pod in left}


# -- polling helpers: each returns its value once the condition holds, else None ----------
async def _when_total(cluster: Any, cpu_milli: int) -> Any:
    resources = await cluster.inquiry_resource()
    return resources if resources.cpu_total_milli == cpu_milli else None


async def _when_requested(cluster: Any, cpu_milli: int) -> Any:
    resources = await cluster.inquiry_resource()
    return resources if resources.cpu_request_milli == cpu_milli else None


async def _when_running(cluster: Any, job: str, count: int) -> Any:
    counts = await cluster.job_pods(ref(job))
    return counts if counts.running == count else None


async def _when_pods(cluster: Any, job: str, count: int) -> Any:
    pods = await cluster.trainer_pods(ref(job))
    return sorted(pods) if len(pods) == count else None
