"""`edl controller --kueue` watches its servers' Workloads: Kueue's admission or eviction
of a queued job's master and pservers acts at once, not at the next status refresh.

kmock runs no Kueue: the test writes the Workload status Kueue would (admitted, then
evicted by a preemption) and times what edl does with the status refresh set to 30 s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kmock
from lightkube import AsyncClient
from lightkube.types import PatchType

from edl.kube.cluster import TrainingJobResource
from edl.kube.kueue import ResourceFlavor, Workload
from edl.kube.runner import ControllerOptions, ControllerProcess
from kube.conftest import stopped_or_explained
from kube.test_controller_kmock import JOBS, RS, TJ, example_job, exists, stored
from polling import eventually

WORKLOADS = kmock.resource("kueue.x-k8s.io/v1beta2/workloads")
STATUS_INTERVAL = 30.0  # the refresh the watch must not wait for
PROMPT_S = 5.0  # a watch event is acted on well within this (the refresh is 30 s away)


def _condition(kind: str, status: str, reason: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": reason,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


async def _set_status(api: AsyncClient, status: dict[str, Any]) -> None:
    await api.patch(Workload.Status, "queued-servers", {"status": status},
                    namespace="default", patch_type=PatchType.MERGE)


async def test_a_servers_workloads_admission_and_eviction_act_before_the_status_refresh(
    api: AsyncClient, emulator: Any
) -> None:
    process = ControllerProcess(ControllerOptions(
        server=str(emulator.url), port=0, interval=0.5, status_interval=STATUS_INTERVAL,
        lease_duration=6, renew_deadline=4, retry_period=0.5, identity="test-controller",
        kueue=True))
    task = asyncio.create_task(process.run())
    try:
        await eventually(lambda: process.health.synced or task.done())
        assert not task.done(), task.exception()
        job = example_job("queued")
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
        await api.create(TrainingJobResource.from_dict(job), namespace="default")
        workload = await eventually(lambda: stored(emulator, WORKLOADS, "queued-servers"))
        assert workload["metadata"]["labels"]["edl.dev/job"] == "queued"
        assert not exists(emulator, RS, "queued-master")  # held until Kueue admits it
        await api.create(ResourceFlavor.from_dict({"metadata": {"name": "default"},
                                                   "spec": {}}))
        admission = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": pod_set["name"], "flavors": {"cpu": "default"},
             "count": pod_set["count"]} for pod_set in workload["spec"]["podSets"]]}

        start = time.monotonic()
        await _set_status(api, {"admission": admission, "conditions": [
            _condition("QuotaReserved", "True", "QuotaReserved"),
            _condition("Admitted", "True", "Admitted")]})
        await eventually(lambda: exists(emulator, RS, "queued-master"), PROMPT_S,
                         "the master created on the admission's watch event")
        admitted_after = time.monotonic() - start

        start = time.monotonic()
        await _set_status(api, {"conditions": [
            _condition("QuotaReserved", "True", "QuotaReserved"),
            _condition("Admitted", "True", "Admitted"),
            _condition("Evicted", "True", "Preempted")]})
        # kmock filters no label selector: the job's trainer pods pass for pservers still
        # stopping, so the master stays (as it would until the next refresh on a cluster)
        await eventually(lambda: not exists(emulator, RS, "queued-pserver")
                         and not exists(emulator, JOBS, "queued-trainer")
                         and stored(emulator, TJ, "queued")["status"]["message"].startswith(
                             "Kueue evicted workload queued-servers: Preempted"), PROMPT_S,
                         "the pservers and trainers deleted on the eviction's watch event")
        evicted_after = time.monotonic() - start
        assert max(admitted_after, evicted_after) < PROMPT_S < STATUS_INTERVAL
        assert process.cluster is not None and "Workload" in process.cluster.watch_health()
    finally:
        process.stop.set()
        await stopped_or_explained(task, 120)
