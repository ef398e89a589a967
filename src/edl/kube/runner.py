"""`edl controller` assembled: metrics/health server, Lease election, caches, kopf, loops.

Standby replicas serve /healthz and /readyz and wait for the Lease. The leader
starts the node/pod caches, then the Controller, the Autoscaler and kopf
(in that order, so no TrainingJob event arrives before the Controller listens).
If the leader cannot renew its Lease it stops everything and `run_controller`
raises `LeaseLost`; the process exits and Kubernetes restarts it as a standby.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from edl.control.controller import Controller
from edl.control.loops import ControlLoops
from edl.control.trainers import CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S
from edl.jobparser import DEFAULT_IMAGE, JobParser, PodDefaults
from edl.jobparser.manifests import ETCD_IMAGE
from edl.kube.autoscaling import KubeAutoscaler
from edl.kube.client import make_client
from edl.kube.cluster import KubeCluster
from edl.kube.events import EventRecorder
from edl.kube.leader import LeaderElector
from edl.kube.metrics import ControllerMetrics, HealthState, bound_port, make_app, serve
from edl.kube.operator import OperatorThread

log = logging.getLogger(__name__)


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class ControllerOptions:
    """Everything `edl controller` can be told (see its --help)."""

    server: str | None = None
    namespace: str | None = None
    policy: str = "default"
    max_load_desired: float = 0.97
    interval: float = 5.0
    status_interval: float = 5.0
    host: str = "127.0.0.1"
    port: int = 8080
    lease_namespace: str = "default"
    lease_name: str = "edl-controller"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # Off by default: deploy/rbac.yaml grants no `delete` on pods, and a controller that
    # tried anyway would be refused (403) on its first shrink.
    delete_victims: bool = False
    # First delay and cap between a crashed trainer and its replacement (managed trainers).
    crash_backoff: float = CRASH_BACKOFF_BASE_S
    crash_backoff_max: float = CRASH_BACKOFF_MAX_S
    # what a job gets when it names none (edl.jobparser.PodDefaults)
    image: str = DEFAULT_IMAGE
    etcd_image: str = ETCD_IMAGE
    trainer_priority_class: str = ""


class ControllerProcess:
    """One controller replica; `run()` until `stop` is set or leadership is lost."""

    def __init__(self, options: ControllerOptions) -> None:
        self.options = options
        self.metrics = ControllerMetrics()
        self.health = HealthState()
        self.client = make_client(options.server)
        self.watch_client = make_client(options.server)
        self.events = EventRecorder(self.client)
        self.elector = LeaderElector(
            self.client, namespace=options.lease_namespace, name=options.lease_name,
            identity=options.identity or default_identity(),
            lease_duration=options.lease_duration, renew_deadline=options.renew_deadline,
            retry_period=options.retry_period,
        )
        self.stop = asyncio.Event()
        self.cluster: KubeCluster | None = None
        self.controller: Controller | None = None
        self.autoscaler: KubeAutoscaler | None = None
        self.http_port: int | None = None

    def stop_on_signals(self) -> None:
        """SIGTERM/SIGINT stop the controller cleanly (kopf's own handlers are not used)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)

    async def run(self) -> None:
        runner = await serve(make_app(self.metrics, self.health), self.options.host,
                             self.options.port)
        self.http_port = bound_port(runner)
        beat = asyncio.create_task(self._heartbeat(), name="heartbeat")
        leading = asyncio.create_task(self.elector.run_as_leader(self._lead), name="leader")
        stopping = asyncio.create_task(self.stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait({leading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if leading in done:
                leading.result()  # LeaseLost or a crash of the leader's work
        finally:
            self.stop.set()
            for task in (leading, stopping, beat):
                task.cancel()
            await asyncio.gather(leading, stopping, beat, return_exceptions=True)
            await runner.cleanup()
            await self.client.close()
            await self.watch_client.close()

    async def _heartbeat(self) -> None:
        while True:
            self.health.beat()
            self.health.leader = self.elector.is_leader
            self.metrics.leader.set(1 if self.elector.is_leader else 0)
            cluster = self.cluster
            if cluster is not None:
                for reflector in (cluster.pod_reflector, cluster.node_reflector):
                    self.metrics.watch_restarts.labels(reflector.kind).set(
                        reflector.watch_restarts)
                    stale = reflector.stale_for()
                    self.metrics.watch_stale.labels(reflector.kind).set(stale)
                    self.health.stale_caches[reflector.kind] = stale
                self._observe_jobs(cluster)
            await asyncio.sleep(1.0)

    def _observe_jobs(self, cluster: KubeCluster) -> None:
        for (namespace, name), body in cluster.training_jobs():
            status = body.get("status")
            trainers = status.get("trainers") if isinstance(status, Mapping) else None
            if not isinstance(trainers, Mapping):
                continue  # not written by this controller yet (or written in another shape)
            desired, running = trainers.get("desired", 0), trainers.get("running", 0)
            if isinstance(desired, int) and isinstance(running, int):
                self.metrics.observe_job(namespace, name, desired, running)

    async def _lead(self) -> None:
        options = self.options
        log.info("%s leads: starting caches, controller, autoscaler and kopf",
                 self.elector.identity)
        self.health.leader = True
        cluster = KubeCluster(self.client, namespace=options.namespace, events=self.events,
                              watch_client=self.watch_client,
                              delete_victims=options.delete_victims,
                              fence=self.elector.holds_lease,
                              crash_backoff_s=(options.crash_backoff,
                                               options.crash_backoff_max))
        self.cluster = cluster
        await cluster.start()
        self.health.synced = True
        self.autoscaler = KubeAutoscaler(
            cluster, metrics=self.metrics, events=self.events, policy=options.policy,
            max_load_desired=options.max_load_desired, interval=options.interval)
        parser = JobParser(defaults=PodDefaults(
            image=options.image, etcd_image=options.etcd_image,
            trainer_priority_class=options.trainer_priority_class or None))
        self.controller = Controller(cluster, self.autoscaler, parser=parser,
                                     status_interval=options.status_interval)
        kopf = OperatorThread(cluster, server=options.server, namespace=options.namespace)
        loops = ControlLoops(self.controller, self.autoscaler)
        loops.start()
        await asyncio.sleep(0)  # let the Controller subscribe before kopf delivers jobs
        kopf.start()
        loops.add("kopf", kopf.wait())
        try:
            await loops.wait()
        finally:
            # the loops first: they write (scaling, status); kopf only delivers events and
            # takes seconds to stop, during which a deposed leader must write nothing
            await loops.stop()
            await kopf.stop()
            await cluster.stop()
            self.health.synced = False
            self.health.leader = False
