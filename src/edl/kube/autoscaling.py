"""The Autoscaler as it runs on Kubernetes: the same loop plus Events and metrics.

`edl.control.autoscaler.Autoscaler.tick` decides and scales; this subclass only
reports: a Kubernetes Event per applied decision (before -> after, reason,
cluster load vs max_load_desired), the decision counter (by kind: grow, shrink,
hold; the reason's text goes to the Event, never to a label) and the
plan-duration histogram. No scaling logic lives here.
"""

from __future__ import annotations

import time

from edl.control.autoscaler import Autoscaler
from edl.jobparser.manifests import etcd_endpoints
from edl.kube.cluster import KubeCluster
from edl.kube.events import EventRecorder, scale_event
from edl.kube.metrics import ControllerMetrics
from edl.kube.throughput import EtcdProgressSource
from edl.policy import Decision, Policy
from edl.runtime.collective.batch import EtcdBatchSink


class KubeAutoscaler(Autoscaler):
    """Autoscaler that explains every decision in an Event and in Prometheus metrics."""

    def __init__(
        self,
        cluster: KubeCluster,
        *,
        metrics: ControllerMetrics,
        events: EventRecorder,
        policy: Policy | str = "default",
        max_load_desired: float = 0.97,
        interval: float = 5.0,
        min_event_gap: float = 1.0,
    ) -> None:
        # a throughput-aware policy reads each job's measured throughput from its etcd
        wants_throughput = (policy if isinstance(policy, str) else policy.name) == "goodput"
        source = EtcdProgressSource(self._etcd_of, collective=self._collective_job) if (
            wants_throughput) else None
        super().__init__(cluster, policy=policy, max_load_desired=max_load_desired,
                         interval=interval, min_event_gap=min_event_gap, throughput=source)
        self.kube = cluster
        self.metrics = metrics
        self.events = events
        self.batches.sink = EtcdBatchSink(self._etcd_of)  # the chosen batch, for the workers

    def _collective_job(self, namespace: str, name: str) -> bool:
        job = self._jobs.get((namespace, name))
        return job is not None and job.collective()

    def _etcd_of(self, namespace: str, name: str) -> str | None:
        job = self._jobs.get((namespace, name))
        return etcd_endpoints(job) if job is not None else None

    async def tick(self) -> list[Decision]:
        started = time.perf_counter()
        decisions = await super().tick()
        self.metrics.plan_duration.observe(time.perf_counter() - started)
        resources = self.kube.last_resources
        if resources is not None:
            self.metrics.observe_resources(resources)
        for decision in decisions:
            self.metrics.observe_decision(decision.parallelism, decision.target)
            if decision.target == decision.parallelism:
                continue
            body = self.kube.training_job(decision.namespace, decision.name) or {}
            uid = (body.get("metadata") or {}).get("uid")
            await self.events.post(scale_event(
                decision.namespace, decision.name, uid,
                before=decision.parallelism, after=decision.target, reason=decision.reason,
                resources=resources, max_load_desired=self.max_load_desired,
            ))
        return decisions
