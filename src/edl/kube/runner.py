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

import edl
from edl.control.controller import Controller
from edl.control.loops import ControlLoops
from edl.control.trainers import CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S
from edl.jobparser import DEFAULT_IMAGE, JobParser, PodDefaults
from edl.jobparser.manifests import ETCD_IMAGE, etcd_endpoints
from edl.kube.autoscaling import KubeAutoscaler
from edl.kube.client import kube_config, make_client
from edl.kube.cluster import KubeCluster
from edl.kube.events import EventRecorder
from edl.kube.health import EtcdJobHealth
from edl.kube.leader import LeaderElector
from edl.kube.metrics import ControllerMetrics, HealthState, bound_port, make_app, serve
from edl.kube.operator import OperatorThread

log = logging.getLogger(__name__)

# Where deploy/rbac.yaml grants the Lease (and deploy/namespace.yaml creates): the default
# works with the shipped manifests both in the cluster and from a laptop.
DEFAULT_LEASE_NAMESPACE = "edl-system"


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
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE
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
    # the cluster runs Kueue: follow trainer Jobs and Workloads (deploy/kueue-rbac.yaml)
    kueue: bool = False


class ControllerProcess:
    """One controller replica; `run()` until `stop` is set or leadership is lost."""

    def __init__(self, options: ControllerOptions) -> None:
        self.options = options
        self.metrics = ControllerMetrics()
        self.health = HealthState()
        current = kube_config(options.server).get()  # the context in use (None: no context)
        self.server_url = current.cluster.server if current is not None else "the API server"
        self.client = make_client(options.server)
        self.watch_client = make_client(options.server)
        self.events = EventRecorder(self.client)
        self.elector = LeaderElector(
            self.client, namespace=options.lease_namespace, name=options.lease_name,
            identity=options.identity or default_identity(),
            lease_duration=options.lease_duration, renew_deadline=options.renew_deadline,
            retry_period=options.retry_period, server=self.server_url,
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

    def startup_line(self) -> str:
        """Everything an admin checks first: where, who, what it watches, which Lease."""
        o = self.options
        return (f"edl controller {edl.__version__}: API server {self.server_url}, identity "
                f"{self.elector.identity}, namespaces {o.namespace or 'all'}, Lease "
                f"{o.lease_namespace}/{o.lease_name}, policy {o.policy} (max load "
                f"{o.max_load_desired:g}, tick {o.interval:g}s), serving "
                f"http://{o.host}:{self.http_port}/metrics, /healthz, /readyz")

    async def run(self) -> None:
        runner = await serve(make_app(self.metrics, self.health), self.options.host,
                             self.options.port)
        self.http_port = bound_port(runner)
        log.info("%s", self.startup_line())
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
            self.health.lease_error = self.elector.last_error
            self.metrics.leader.set(1 if self.elector.is_leader else 0)
            exporting = self.elector.is_leader and self.health.synced
            if exporting != self.metrics.leading:
                self.metrics.set_leading(exporting)
            cluster = self.cluster
            if cluster is not None and exporting:
                for kind, (restarts, stale) in cluster.watch_health().items():
                    self.metrics.observe_watch(kind, restarts, stale)
                    self.health.stale_caches[kind] = stale
                self._observe_jobs(cluster)
            await asyncio.sleep(1.0)

    def _observe_jobs(self, cluster: KubeCluster) -> None:
        counts: dict[tuple[str, str], tuple[int, ...]] = {}
        for (namespace, name), body in cluster.training_jobs():
            status = body.get("status")
            trainers = status.get("trainers") if isinstance(status, Mapping) else None
            if not isinstance(trainers, Mapping):
                continue  # not written by this controller yet (or written in another shape)
            desired, running = trainers.get("desired", 0), trainers.get("running", 0)
            spec = body.get("spec")
            trainer = spec.get("trainer") if isinstance(spec, Mapping) else None
            minimum = trainer.get("min-instance") if isinstance(trainer, Mapping) else None
            if isinstance(desired, int) and isinstance(running, int):
                counts[namespace, name] = ((desired, running, minimum)
                                           if isinstance(minimum, int) else (desired, running))
        self.metrics.observe_jobs(counts)  # a deleted job's series go with it

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
                                               options.crash_backoff_max),
                              kueue=options.kueue)
        self.cluster = cluster
        cluster.on_warning = self.metrics.observe_warning
        await cluster.start()
        self.health.synced = True
        self.autoscaler = KubeAutoscaler(
            cluster, metrics=self.metrics, events=self.events, policy=options.policy,
            max_load_desired=options.max_load_desired, interval=options.interval)
        parser = JobParser(defaults=PodDefaults(
            image=options.image, etcd_image=options.etcd_image,
            trainer_priority_class=options.trainer_priority_class or None))
        health = EtcdJobHealth(etcd_endpoints, lambda namespace, name: [
            pod.name for pod in cluster.state.trainer_pods(namespace, name)])
        self.controller = Controller(cluster, self.autoscaler, parser=parser,
                                     status_interval=options.status_interval, health=health)
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
