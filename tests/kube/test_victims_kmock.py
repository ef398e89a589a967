"""`KubeCluster.scale_trainer_job` against kmock's Kubernetes emulator over HTTP.

The emulator runs no Job controller, so what is checked is the request sequence
and its effect on the stored objects: the named trainer pods are deleted first,
then the Job's parallelism is patched (see the method's docstring for why that
order is race-free on Kubernetes >= 1.29), and a cluster role that may not delete
pods degrades to a plain scale.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kmock
from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod

from edl.cluster.port import TrainerPod, VictimScaling
from edl.kube.cluster import KubeCluster
from polling import eventually

PODS = kmock.resource("v1/pods")
JOBS = kmock.resource("batch/v1/jobs")
TRAINING_JOB = SimpleNamespace(metadata=SimpleNamespace(namespace="default", name="j"))



def trainer(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"edl.dev/job": "j", "edl.dev/role": "trainer"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "trainer", "image": "edl",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running"},
    }


def live(emulator: Any, resource: Any, name: str) -> bool:
    key = (resource, "default", name)
    return key in emulator.objects and not emulator.objects[key].deleted


async def setup(api: AsyncClient, emulator: Any) -> tuple[KubeCluster, list[tuple[str, str]]]:
    for node in ("n1", "n2"):
        await api.create(Node.from_dict({"metadata": {"name": node}, "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi"}}}))
    await api.create(Job.from_dict({
        "metadata": {"name": "j-trainer", "namespace": "default"},
        "spec": {"parallelism": 3, "template": {"spec": {"containers": [
            {"name": "trainer", "image": "edl"}], "restartPolicy": "Never"}}},
    }), namespace="default")
    for name, node in (("t1", "n1"), ("t2", "n2"), ("t3", "n1")):
        await api.create(Pod.from_dict(trainer(name, node)), namespace="default")
    cluster = KubeCluster(api)
    await cluster.start(timeout=30)
    seen: list[tuple[str, str]] = []

    def record(request: Any) -> bool:  # never matches: only records the sequence
        if request.resource in (PODS, JOBS) and request.method in ("DELETE", "PATCH"):
            method = "DELETE" if request.method == "DELETE" else "PATCH"
            seen.append((method, request.url.path.rsplit("/", 1)[-1]))
        return False

    emulator.fail_next(record, 500, times=10**9)
    return cluster, seen


async def test_victims_are_deleted_then_parallelism_is_patched(
    api: AsyncClient, emulator: Any
) -> None:
    cluster, seen = await setup(api, emulator)
    try:
        assert isinstance(cluster, VictimScaling)
        await eventually(lambda: len(cluster.state.trainer_pods("default", "j")) == 3)
        pods = await cluster.trainer_pods(TRAINING_JOB)  # type: ignore[arg-type]
        assert sorted(pods) == [TrainerPod("t1", "n1"), TrainerPod("t2", "n2"),
                                TrainerPod("t3", "n1")]
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = 1
        stored = await cluster.scale_trainer_job(job, ["t1", "t3"])
        assert stored["spec"]["parallelism"] == 1
        assert seen == [("DELETE", "t1"), ("DELETE", "t3"), ("PATCH", "j-trainer")]
        assert not live(emulator, PODS, "t1") and not live(emulator, PODS, "t3")
        assert live(emulator, PODS, "t2")
        await eventually(lambda: cluster.state.trainer_pods("default", "j")
                         == [TrainerPod("t2", "n2")])
    finally:
        await cluster.stop()


async def test_no_right_to_delete_pods_falls_back_to_a_plain_scale(
    api: AsyncClient, emulator: Any
) -> None:
    cluster, seen = await setup(api, emulator)
    try:
        forbidden = emulator.fail_next(
            lambda r: r.resource == PODS and r.method == "DELETE", 403, times=1)
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = 2
        await cluster.scale_trainer_job(job, ["t1"])
        assert forbidden.hits == 1 and live(emulator, PODS, "t1")
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        assert job["spec"]["parallelism"] == 2
        job["spec"]["parallelism"] = 1
        await cluster.scale_trainer_job(job, ["t2"])  # no second attempt at deleting
        assert [call for call in seen if call[0] == "DELETE"] == [("DELETE", "t1")]
        assert live(emulator, PODS, "t2")
        assert (await cluster.get_trainer_job_by_name("default", "j-trainer"))[
            "spec"]["parallelism"] == 1
    finally:
        await cluster.stop()
