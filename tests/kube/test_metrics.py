"""Prometheus conventions of the controller's metrics: bounded labels, no stale series,
a standby that exports only what it knows; readiness that says why it is false."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.accounting import ClusterResource
from edl.kube.metrics import DECISION_KINDS, ControllerMetrics, HealthState, decision_kind


def series(metrics: ControllerMetrics) -> list[str]:
    """The exposition's sample lines (no comments)."""
    return [line for line in metrics.render().decode().splitlines()
            if line and not line.startswith("#")]


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), max_size=50))
def test_decision_labels_are_bounded_whatever_the_counts(decisions: list[tuple[int, int]]) -> None:
    metrics = ControllerMetrics()
    metrics.set_leading(True)
    for before, after in decisions:
        metrics.observe_decision(before, after)
        assert decision_kind(before, after) in DECISION_KINDS
    lines = [s for s in series(metrics) if s.startswith("edl_scale_decisions_total")]
    assert len(lines) == len(DECISION_KINDS)  # one series per kind, never per text or count
    assert sum(float(line.split()[-1]) for line in lines) == len(decisions)


def test_a_deleted_job_loses_its_series() -> None:
    metrics = ControllerMetrics()
    metrics.set_leading(True)
    metrics.observe_jobs({("ns", "a"): (6, 6), ("ns", "b"): (2, 1)})
    assert sum('job="a"' in s for s in series(metrics)) == 2
    metrics.observe_jobs({("ns", "b"): (2, 2)})
    assert not any('job="a"' in s for s in series(metrics))
    assert 'edl_job_trainers_running{job="b",namespace="ns"} 2.0' in series(metrics)


def test_a_standby_exports_only_edl_leader() -> None:
    metrics = ControllerMetrics()
    assert series(metrics) == ["edl_leader 0.0"]
    metrics.leader.set(1)
    metrics.set_leading(True)
    metrics.observe_resources(ClusterResource(node_count=4, cpu_total_milli=16000))
    metrics.observe_jobs({("ns", "a"): (6, 6)})
    assert "edl_cluster_nodes 4.0" in series(metrics)
    metrics.leader.set(0)
    metrics.set_leading(False)  # stepped down: nothing it knew as leader is exported
    assert series(metrics) == ["edl_leader 0.0"]


def test_every_exported_name_is_listed() -> None:
    metrics = ControllerMetrics()
    metrics.set_leading(True)
    names = metrics.names()
    assert {"edl_leader", "edl_scale_decisions_total", "edl_plan_duration_seconds_bucket",
            "edl_job_trainers_desired", "edl_cluster_allocatable"} <= names


def test_readiness_is_false_while_the_lease_cannot_be_used_and_says_why() -> None:
    health = HealthState()
    assert health.ready() == (True, "standby (the Lease is readable; waiting to hold it)")
    health.lease_error = "Lease edl-system/edl-controller: 403: forbidden"
    ok, text = health.ready()
    assert not ok and "standby" in text and "403: forbidden" in text
    health.leader, health.synced = True, True
    ok, text = health.ready()
    assert not ok and text.startswith("leader")
    health.lease_error = None
    assert health.ready() == (True, "leader, caches synced")


def test_watch_restarts_is_a_counter_for_every_kind_watched() -> None:
    """A counter (`_total`), growing by what each stream adds; a new term's streams count
    from 0 again without the counter going back; every cache's kind has a series."""
    from typing import Any, cast

    from edl.kube.cluster import KubeCluster

    client = cast(Any, object())  # the caches are only built here, never started
    admission = {"LimitRange", "PriorityClass"}  # what admission makes of trainer pods
    assert set(KubeCluster(client).watch_health()) == {
        "Pod", "Node", "ResourceQuota", "TrainingJob", *admission}
    assert set(KubeCluster(client, kueue=True).watch_health()) == {
        "Pod", "Node", "ResourceQuota", "TrainingJob", "Job", "Workload", *admission}
    metrics = ControllerMetrics()
    metrics.set_leading(True)
    for restarts in (0, 2, 5, 1):  # 1: the next term's reflector, restarted once
        metrics.observe_watch("ResourceQuota", restarts, 3.0)
    text = "\n".join(series(metrics))
    assert 'edl_watch_restarts_total{kind="ResourceQuota"} 6.0' in text
    assert 'edl_watch_stale_seconds{kind="ResourceQuota"} 3.0' in text
    assert "# TYPE edl_watch_restarts_total counter" in metrics.render().decode()


def test_warnings_are_counted_by_a_bounded_reason() -> None:
    metrics = ControllerMetrics()
    metrics.set_leading(True)
    for reason in ("FailedCreate", "FailedCreate", "pods x is forbidden"):
        metrics.observe_warning(reason)
    text = "\n".join(series(metrics))
    assert 'edl_job_warnings_total{reason="FailedCreate"} 2.0' in text
    assert 'edl_job_warnings_total{reason="Other"} 1.0' in text
    assert 'edl_job_warnings_total{reason="AnotherController"} 0.0' in text
