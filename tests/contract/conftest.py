"""One `Cluster` port, several implementations: each harness below gives the contract
tests a cluster plus the admin acts the tests need (what ``kubectl`` and the cluster's
own controllers would do), so the same test bodies run against every implementation.

* ``inproc``: `InProcessCluster` on real time, its own Job controller and scheduler
  making the trainer pods (simulated pods that start in 50 ms), trainer pod events
  delivered ``WATCH_LAG_S`` late.
* ``kube-emulator``: `KubeCluster` over HTTP against kmock's emulator (`kube.emulator`),
  which runs no controllers: the harness creates the trainer pods itself, bound and
  Running, as the Job controller, the scheduler and a kubelet would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import kmock
import pytest
import pytest_asyncio
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER, trainer_job_name
from edl.cluster.inproc import AsyncioClock, Fixed, InProcessCluster, SimulatedPodRunner
from edl.cluster.port import Cluster, Manifest
from edl.kube.client import make_client
from edl.kube.cluster import KubeCluster, TrainingJobResource
from edl.kube.crd import PLURAL
from edl.kube.operator import OperatorThread
from kube.emulator import EdlEmulator, declare_resources
from polling import eventually

TRAINER_CPU = "1"
WATCH_LAG_S = 0.2


class Harness(Protocol):
    cluster: Cluster

    async def add_node(self, name: str, cpu: str, memory: str) -> None: ...
    async def submit(self, job: Manifest) -> None: ...
    async def remove(self, namespace: str, name: str) -> None: ...
    async def run_trainers(self, job: str, nodes: list[str]) -> list[str]: ...


class InProcessHarness:
    def __init__(self) -> None:
        self.inproc = InProcessCluster(
            AsyncioClock(),
            SimulatedPodRunner(AsyncioClock(), start_latency=Fixed(0.05)),
        )
        # the pod watch lags, as a real informer's does (docs/fidelity.md)
        self.inproc.trainer_watch_lag_s = WATCH_LAG_S
        self.cluster: Cluster = self.inproc

    async def add_node(self, name: str, cpu: str, memory: str) -> None:
        self.inproc.add_node(name, {"cpu": cpu, "memory": memory})

    async def submit(self, job: Manifest) -> None:
        self.inproc.create_training_job(job)

    async def remove(self, namespace: str, name: str) -> None:
        self.inproc.delete_training_job(namespace, name)

    async def run_trainers(self, job: str, nodes: list[str]) -> list[str]:
        """The Job controller makes the pods; the scheduler places them (nodes are a hint
        the in-process scheduler is free to ignore)."""
        await eventually(
            lambda: len(self._running(job)) >= len(nodes), 30, "trainer pods running"
        )
        return sorted(self._running(job))

    def _running(self, job: str) -> list[str]:
        return [
            pod["metadata"]["name"]
            for pod in self.inproc.list_pods("default")
            if pod["metadata"]["labels"].get(LABEL_JOB) == job
            and pod["status"]["phase"] == "Running"
        ]

    async def close(self) -> None:
        return None


class EmulatorHarness:
    def __init__(self, emulator: EdlEmulator, api: AsyncClient) -> None:
        self.emulator = emulator
        self.api = api
        self.kube = KubeCluster(api)
        self.cluster: Cluster = self.kube
        # TrainingJob events reach a KubeCluster through kopf, as in `edl controller`
        self.operator = OperatorThread(self.kube, server=str(emulator.url), namespace=None)
        self._pods = 0

    async def start(self) -> None:
        await self.kube.start(timeout=30)
        self.operator.start()
        # kopf stopped amid its API discovery retries a request for its 5 s grace;
        # a test begins once kopf watches TrainingJobs, as `edl controller` serves then
        await eventually(
            lambda: PLURAL in self.emulator.watched, 30, "kopf to watch TrainingJobs"
        )

    async def add_node(self, name: str, cpu: str, memory: str) -> None:
        await self.api.create(Node.from_dict({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}},
        }))

    async def submit(self, job: Manifest) -> None:
        await self.api.create(TrainingJobResource.from_dict(job), namespace="default")

    async def remove(self, namespace: str, name: str) -> None:
        await self.api.delete(TrainingJobResource, name, namespace=namespace)

    async def run_trainers(self, job: str, nodes: list[str]) -> list[str]:
        """What the Job controller, the scheduler and the kubelet would do."""
        names = []
        for node in nodes:
            self._pods += 1
            name = f"{trainer_job_name(job)}-{self._pods}"
            names.append(name)
            await self.api.create(Pod.from_dict({
                "metadata": {"name": name, "namespace": "default",
                             "labels": {LABEL_JOB: job, LABEL_ROLE: ROLE_TRAINER}},
                "spec": {"nodeName": node, "containers": [{
                    "name": "trainer", "image": "edl",
                    "resources": {"requests": {"cpu": TRAINER_CPU, "memory": "1Gi"}}}]},
                "status": {"phase": "Running"},
            }), namespace="default")
        await eventually(
            lambda: len(self.kube.state.trainer_pods("default", job)) >= len(nodes),
            30, "the pod cache to see the trainers",
        )
        return sorted(names)

    async def close(self) -> None:
        await self.operator.stop()
        await self.kube.stop()


@pytest_asyncio.fixture(params=["inproc", "kube-emulator"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "inproc":
        inproc = InProcessHarness()
        yield inproc
        await inproc.close()
        return
    async with EdlEmulator() as handler, kmock.Server(handler, host="127.0.0.1"):
        declare_resources(handler)
        api = make_client(str(handler.url), timeout=10)
        kube = EmulatorHarness(handler, api)
        try:
            await kube.start()
            yield kube
        finally:
            await kube.close()
            await api.close()
            await asyncio.sleep(0)
