"""edl's trainer controller running a managed trainer Job's pods through the API
(kmock's emulator: no Job controller, no kubelet; the test plays the kubelet by
patching pod status).

Checked: pods are created from the stored Job's template with an ownerReference to
it; a growth's planned nodes (the Job's placement annotation, written in the scale
patch) become the new pods' preferred node affinity; a crash is counted into the
Job's status subresource (through ``uncountedTerminatedPods`` and the pod's
``edl.dev/counted`` mark; the failed pod is kept) and its replacement waits, while a
scale-up beside it is created at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from edl.api.names import ANNOTATION_TRAINER_PLACEMENT
from edl.cluster.port import ManagedTrainers
from edl.control.placement import annotate
from edl.control.trainer_controller import TrainerController
from edl.kube.cluster import KubeCluster
from edl.kube.trainer_index import rfc3339
from polling import eventually

LABELS = {"edl.dev/job": "j", "edl.dev/role": "trainer"}


async def names(api: AsyncClient) -> list[str]:
    return sorted([pod.metadata.name async for pod in api.list(Pod, namespace="default")])


async def kubelet_exit(api: AsyncClient, name: str, code: int) -> None:
    await api.patch(Pod, name, {"status": {
        "phase": "Failed", "containerStatuses": [{
            "name": "trainer", "image": "edl", "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {
            "exitCode": code, "finishedAt": rfc3339(time.time()),
            "message": "ValueError: boom"}}}]}}, namespace="default",
        patch_type=PatchType.MERGE)


def live(cluster: KubeCluster) -> list[str]:
    return [p["metadata"]["name"] for p in cluster.trainer_pod_manifests("default", "j")
            if p["status"]["phase"] not in ("Succeeded", "Failed")]


async def _is(value: Any, expected: int) -> bool:
    return await value == expected


async def _managed_job(api: AsyncClient, parallelism: int) -> KubeCluster:
    """One node and a trainer Job managed by edl; a started KubeCluster over them."""
    await api.create(Node.from_dict({"metadata": {"name": "n1"}, "status": {
        "allocatable": {"cpu": "64", "memory": "64Gi"}}}))
    await api.create(Job.from_dict({
        "metadata": {"name": "j-trainer", "namespace": "default", "labels": LABELS},
        "spec": {"parallelism": parallelism, "backoffLimit": 6,
                 "managedBy": "edl.dev/trainer-controller",
                 "template": {"metadata": {"labels": LABELS}, "spec": {"containers": [
                     {"name": "trainer", "image": "edl"}], "restartPolicy": "Never"}}},
    }), namespace="default")
    cluster = KubeCluster(api)
    await cluster.start(timeout=30)
    return cluster


async def test_managed_trainer_job_pods_crashes_and_scale_ups(
    api: AsyncClient, emulator: Any
) -> None:
    cluster = await _managed_job(api, 3)
    trainers = TrainerController(cluster)
    try:
        assert isinstance(cluster, ManagedTrainers)
        trainers.track(("default", "j"))
        await eventually(lambda: len(cluster.trainer_pod_manifests("default", "j")) == 3)
        pods = [pod async for pod in api.list(Pod, namespace="default")]
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        assert {ref.uid for pod in pods for ref in pod.metadata.ownerReferences} == {
            job["metadata"]["uid"]}
        assert all(pod.metadata.labels == LABELS for pod in pods)

        crashed = pods[0].metadata.name
        await kubelet_exit(api, crashed, 1)

        async def failed() -> int:
            job = await cluster.get_trainer_job_by_name("default", "j-trainer")
            return int(job["status"].get("failed") or 0)

        await eventually(lambda: _is(failed(), 1))  # counted through uncountedTerminatedPods
        kept = await api.get(Pod, crashed, namespace="default")
        assert kept.metadata.annotations["edl.dev/counted"] == "true"  # kept, as upstream
        await asyncio.sleep(1.0)
        assert len(live(cluster)) == 2  # the crash replacement waits 10 s

        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = 5
        await cluster.update_trainer_job(job)  # a scale-up is not held back by the crash
        await eventually(lambda: len(live(cluster)) == 4)

        drained = sorted(live(cluster))[0]
        await kubelet_exit(api, drained, 143)  # as a drained trainer, but not deleted: a crash
        await eventually(lambda: _is(failed(), 2))
    finally:
        await cluster.stop()


async def test_a_scale_up_with_planned_nodes_creates_trainers_preferring_them(
    api: AsyncClient, emulator: Any
) -> None:
    cluster = await _managed_job(api, 1)
    trainers = TrainerController(cluster)
    try:
        trainers.track(("default", "j"))
        await eventually(lambda: len(cluster.trainer_pod_manifests("default", "j")) == 1)
        first = await names(api)
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = 3
        annotate(job, ["n1", "n2"], 3, 7.0)  # as the Autoscaler does on a planned growth
        stored = await cluster.update_trainer_job(job)
        assert ANNOTATION_TRAINER_PLACEMENT in stored["metadata"]["annotations"]
        await eventually(lambda: len(cluster.trainer_pod_manifests("default", "j")) == 3)
        preferred = []
        for name in await names(api):
            pod = await api.get(Pod, name, namespace="default")
            affinity = pod.spec.affinity
            if name in first:
                assert affinity is None  # created before the plan: no preference
                continue
            (term,) = affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution
            assert term.weight == 100 and affinity.nodeAffinity.\
                requiredDuringSchedulingIgnoredDuringExecution is None
            (expression,) = term.preference.matchExpressions
            assert (expression.key, expression.operator) == ("kubernetes.io/hostname", "In")
            preferred += expression.values
        assert sorted(preferred) == ["n1", "n2"]
    finally:
        await cluster.stop()
