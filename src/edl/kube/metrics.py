"""Prometheus metrics and the health/readiness endpoints of `edl controller`.

One `ControllerMetrics` per process, each with its own registry, so tests can
run several controllers side by side. The HTTP server is aiohttp (already a
kopf dependency) on the controller's event loop: /metrics, /healthz, /readyz.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

if TYPE_CHECKING:
    from edl.accounting import ClusterResource


# The kinds of scale decision: the label's only values (Prometheus keeps one series per
# label value, so the decision's text, with its counts and shares, must never be a label).
DECISION_KINDS = ("grow", "shrink", "hold")


def decision_kind(before: int, after: int) -> str:
    """grow, shrink or hold: what a decision does to a job's trainer count."""
    return "grow" if after > before else "shrink" if after < before else "hold"


# the reasons of the Warning Events edl posts on TrainingJobs about their pods
# (control/trainer_controller.py, control/controller.py): a bounded label
WARNING_REASONS = ("FailedCreate", "AnotherController", "AnotherInstallation", "Other")


class ControllerMetrics:
    """Every gauge/counter the controller exports, on private registries.

    What only the leader knows (the cluster, the jobs, the decisions, its caches) is on
    `leader_registry` and exported only while this replica leads: a standby exports
    `edl_leader 0` and nothing else, so Prometheus, which scrapes every replica, stores
    no zeros or stale figures beside the leader's.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.leader = Gauge("edl_leader", "1 while this replica holds the leader Lease",
                            registry=self.registry)
        self.leading = False
        self.leader_registry = r = CollectorRegistry()
        self.requested = Gauge(
            "edl_cluster_requested", "Resources requested by pods that are not finished",
            ["resource"], registry=r)
        self.allocatable = Gauge(
            "edl_cluster_allocatable", "Allocatable resources of all nodes",
            ["resource"], registry=r)
        self.nodes = Gauge("edl_cluster_nodes", "Nodes in the cluster", registry=r)
        self.trainers_desired = Gauge(
            "edl_job_trainers_desired", "Trainer parallelism of a TrainingJob",
            ["namespace", "job"], registry=r)
        self.trainers_running = Gauge(
            "edl_job_trainers_running", "Running trainer pods of a TrainingJob",
            ["namespace", "job"], registry=r)
        self.trainers_min = Gauge(
            "edl_job_trainers_min", "Trainers a TrainingJob is guaranteed (min-instance)",
            ["namespace", "job"], registry=r)
        self.scale_decisions = Counter(
            "edl_scale_decisions",
            "Scale decisions by kind (grow, shrink, hold; one per elastic job per tick)",
            ["kind"], registry=r)
        for kind in DECISION_KINDS:  # every series exists from the start (rate() needs it)
            self.scale_decisions.labels(kind)
        self.plan_duration = Histogram(
            "edl_plan_duration_seconds", "Time to inquire resources and plan one autoscaler tick",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r)
        self.watch_restarts = Counter(
            "edl_watch_restarts", "Times a list/watch stream of a kind edl watches was "
            "restarted (410 Gone, a broken or silent stream)", ["kind"], registry=r)
        self.watch_stale = Gauge(
            "edl_watch_stale_seconds",
            "Seconds the cache of a kind edl watches has been failing to follow the API "
            "server (0: live)", ["kind"], registry=r)
        self.job_warnings = Counter(
            "edl_job_warnings", "Warning Events edl posted on TrainingJobs, by reason "
            "(FailedCreate: the API server refused a trainer, master or pserver pod)",
            ["reason"], registry=r)
        for reason in WARNING_REASONS:  # every series exists from the start (increase())
            self.job_warnings.labels(reason)
        self._jobs: set[tuple[str, str]] = set()
        self._restarts_seen: dict[str, int] = {}

    def set_leading(self, leading: bool) -> None:
        """Export the leader's metrics from now on (its caches are synced), or stop and
        forget its jobs. `edl_leader` itself is set apart: it is 1 from the Lease on."""
        self.leading = leading
        if not leading:
            self.observe_jobs({})

    def observe_resources(self, res: ClusterResource) -> None:
        """Export cluster totals: requested vs allocatable for CPU (milli), memory (Mi), GPU."""
        self.nodes.set(res.node_count)
        for name, requested, total in (
            ("cpu_milli", res.cpu_request_milli, res.cpu_total_milli),
            ("memory_mega", res.memory_request_mega, res.memory_total_mega),
            ("gpu", res.gpu_request, res.gpu_total),
        ):
            self.requested.labels(name).set(requested)
            self.allocatable.labels(name).set(total)

    def observe_warning(self, reason: str) -> None:
        """One Warning Event posted; a reason edl does not post is counted as Other."""
        self.job_warnings.labels(reason if reason in WARNING_REASONS else "Other").inc()

    def observe_watch(self, kind: str, restarts: int, stale: float) -> None:
        """One watched kind's health: its stream's restarts so far (the counter grows by
        what is new; a fresh stream after a new term counts from 0 again) and staleness."""
        seen = self._restarts_seen.get(kind, 0)
        self.watch_restarts.labels(kind).inc(restarts - seen if restarts >= seen else restarts)
        self._restarts_seen[kind] = restarts
        self.watch_stale.labels(kind).set(stale)

    def observe_job(self, namespace: str, job: str, desired: int, running: int,
                    minimum: int | None = None) -> None:
        self.trainers_desired.labels(namespace, job).set(desired)
        self.trainers_running.labels(namespace, job).set(running)
        if minimum is not None:
            self.trainers_min.labels(namespace, job).set(minimum)
        self._jobs.add((namespace, job))

    def observe_jobs(self, counts: Mapping[tuple[str, str], tuple[int, ...]]) -> None:
        """The jobs that exist now, (desired, running[, min-instance]) each; a job gone
        loses its series."""
        for namespace, job in self._jobs - set(counts):
            self.forget_job(namespace, job)
        for (namespace, job), values in counts.items():
            self.observe_job(namespace, job, *values[:3])

    def forget_job(self, namespace: str, job: str) -> None:
        for gauge in (self.trainers_desired, self.trainers_running, self.trainers_min):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, job)
        self._jobs.discard((namespace, job))

    def observe_decision(self, before: int, after: int) -> None:
        self.scale_decisions.labels(decision_kind(before, after)).inc()

    def names(self) -> set[str]:
        """Every metric name a scrape of the leader can show (the dashboard's vocabulary)."""
        found = set()
        for registry in (self.registry, self.leader_registry):
            for family in registry.collect():
                found |= {sample.name for sample in family.samples} | {family.name}
        return found

    def render(self) -> bytes:
        text = generate_latest(self.registry)
        return text + generate_latest(self.leader_registry) if self.leading else text


class HealthState:
    """What /healthz and /readyz report; the controller updates it as it runs."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.last_beat = clock()
        self.leader = False
        self.synced = False
        self.stale_after = 60.0
        self.cache_stale_after = 60.0
        self.stale_caches: dict[str, float] = {}  # kind -> seconds failing to follow
        self.lease_error: str | None = None  # why the last Lease round failed; None: it worked

    def beat(self) -> None:
        """Called by the autoscaler loop every tick (and by the standby loop)."""
        self.last_beat = self.clock()

    def healthy(self) -> tuple[bool, str]:
        age = self.clock() - self.last_beat
        if age > self.stale_after:
            return False, f"no loop heartbeat for {age:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Ready means able to do its job now: lead, or take over the Lease when it frees."""
        if self.lease_error is not None:
            role = "leader" if self.leader else "standby"
            return False, f"{role}, cannot use the leader {self.lease_error}"
        if not self.leader:
            return True, "standby (the Lease is readable; waiting to hold it)"
        if not self.synced:
            return False, "leader, caches not synced yet"
        stale = {kind: age for kind, age in self.stale_caches.items()
                 if age > self.cache_stale_after}
        if stale:
            ages = ", ".join(f"{kind} {age:.0f}s" for kind, age in sorted(stale.items()))
            return False, f"leader, cache stale (not following the API server): {ages}"
        return True, "leader, caches synced"


def make_app(metrics: ControllerMetrics, health: HealthState) -> web.Application:
    """The aiohttp app serving /metrics, /healthz and /readyz."""

    async def get_metrics(_: web.Request) -> web.Response:
        resp = web.Response(body=metrics.render())
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def get_health(_: web.Request) -> web.Response:
        ok, text = health.healthy()
        return web.Response(text=text + "\n", status=200 if ok else 503)

    async def get_ready(_: web.Request) -> web.Response:
        ok, text = health.ready()
        return web.Response(text=text + "\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_health)
    app.router.add_get("/readyz", get_ready)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving `app`; returns the runner (call `.cleanup()` to stop)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful with port 0)."""
    for addr in runner.addresses:
        if isinstance(addr, tuple):
            return int(addr[1])
    raise RuntimeError("server is not listening")
