"""A short scenario end to end: real Controller/Autoscaler on the in-process cluster, virtual time.

tiny.yaml: 4 nodes x 8 CPU, 500m of system pods per node, a 2-replica web service
(1 CPU each, 0 at t = 65 s), two jobs (pserver 1 CPU, master pod 500m with its sidecar,
trainers 2 CPU, elastic 1..12, static 12) submitted at 2 s and 6 s, deleted at 70 s. Start latency
is fixed at 2 s, so the expected values follow by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edl.sim.runner import run_policy
from edl.sim.scenario import load_scenario

TINY = Path(__file__).parent / "data" / "tiny.yaml"


@pytest.fixture(scope="module")
def tiny():
    return load_scenario(TINY)


def test_static_matches_the_hand_computed_run(tiny) -> None:
    metrics = run_policy(tiny, "static").metrics
    # job-1 fills every 2-CPU hole with its 12 trainers; job-2 never gets one.
    assert metrics.never_started_names == ("job-2",)
    # job-1: pods at 2 s, trainers Running at 4 s -> 2 s; job-2: 6 s until deleted at 70 s.
    assert metrics.pending_by_job == {"job-1": 2.0, "job-2": 64.0}
    assert metrics.avg_pending_s == 33.0
    assert metrics.jain_fairness == 0.5  # [12, 0]
    # system 2 + web 2 + job-1 25.5 + job-2's master 0.5 (its pserver finds no 1-CPU hole)
    assert metrics.steady_utilization_pct == pytest.approx(100 * 30 / 32)
    # web: 2 replicas after the 2 s start latency; scaling to 0 is immediate.
    assert [(lag.at, lag.desired, lag.lag_s) for lag in metrics.lags_by_workload["web"]] == [
        (0.0, 2, 2.0), (65.0, 0, 0.0)
    ]
    assert metrics.service_targets_reached is True


def test_reference_reproduces_the_original_weakness(tiny) -> None:
    """The 2017 algorithm grows job-1 to max and never sheds for job-2 (requests < 97 %)."""
    metrics = run_policy(tiny, "reference").metrics
    # job-2 (submitted at 6 s) gets no trainer while job-1 holds the cluster; at most one
    # once web leaves at 65 s (where its room lands depends on the scheduler's scores)
    assert metrics.pending_by_job["job-2"] >= 65.0 - 6.0


def test_default_starts_every_job_and_shares_fairly(tiny) -> None:
    result = run_policy(tiny, "default")
    metrics = result.metrics
    assert metrics.jobs_never_started == 0
    assert metrics.avg_pending_s is not None and metrics.avg_pending_s <= 5.0
    assert metrics.jain_fairness is not None and metrics.jain_fairness >= 0.9
    assert metrics.steady_utilization_pct is not None and metrics.steady_utilization_pct >= 90.0
    assert metrics.service_max_lag_s == 2.0
    # the autoscaler really scaled: trainers grew past min (1) in both jobs
    for series in result.timeline.jobs.values():
        assert max(series.trainers_desired) > 1
    # deleted at 70 s: nothing of either job runs at the end
    assert all(series.trainers_running[-1] == 0 for series in result.timeline.jobs.values())
    assert result.timeline.times[-1] == 80.0 and len(result.timeline.times) == 81


def test_full_spec_job_in_another_namespace_runs(tiny) -> None:
    """The full TrainingJob form goes through the same Controller (JobParser defaults)."""
    from edl.sim.scenario import parse_scenario

    data = tiny.model_dump(mode="python", exclude_none=True)
    data["training"]["jobs"] = [{
        "name": "resnet",
        "namespace": "team-a",
        "submit_at": 1,
        "static_trainers": 3,
        "spec": {
            "apiVersion": "edl.dev/v1",
            "kind": "TrainingJob",
            "spec": {
                "image": "edl/trainer:latest",
                "fault_tolerant": True,
                "trainer": {"entrypoint": "python train.py", "workspace": "/workspace",
                            "min-instance": 1, "max-instance": 4,
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                "pserver": {"min-instance": 1, "max-instance": 1,
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            },
        },
    }]
    scenario = parse_scenario(data)
    static = run_policy(scenario, "static")
    series = static.timeline.jobs["resnet"]
    assert max(series.trainers_running) == 3
    assert static.metrics.jobs_never_started == 0
    elastic = run_policy(scenario, "default")
    assert max(elastic.timeline.jobs["resnet"].trainers_running) == 4
