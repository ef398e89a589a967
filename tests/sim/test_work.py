"""Jobs that finish: work done by contributing trainers, exact JCT, the real Succeeded path."""

from __future__ import annotations

import pytest

from edl.sim.metrics import WORK_METRIC_KEYS
from edl.sim.runner import run_policy
from edl.sim.scenario import ScenarioError, parse_scenario


def _scenario(work: dict | None, policy_min: int = 2, policy_max: int = 2) -> dict:
    job = {
        "name": "train",
        "submit_at": 10,
        "trainer": {"min": policy_min, "max": policy_max,
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        "pserver": {"count": 1, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        "master": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
    }
    if work is not None:
        job["work"] = work
    return {
        "name": "work",
        "duration_s": 400,
        "pod_start_latency_s": {"min": 2, "max": 2},
        "measure": {"utilization_until_s": 400, "steady_state": {"start": 0, "end": 400}},
        "cluster": {"node_groups": [{"name": "n", "count": 2,
                                     "allocatable": {"cpu": "8", "memory": "16Gi"}}]},
        "training": {"jobs": [job]},
    }


def test_job_finishes_when_its_work_is_done_exactly() -> None:
    work = {"samples": 2000, "throughput": {"per_trainer": 10}, "join_cost_s": 10, "noise": 0}
    result = run_policy(parse_scenario(_scenario(work)), "static")
    # 2 s start, 10 s join, 2000 samples at 2 x 10/s = 100 s
    assert result.metrics.jct_by_job == {"train": pytest.approx(112.0)}
    assert result.metrics.makespan_s == pytest.approx(112.0)
    assert result.metrics.unfinished_names == ()
    series = result.timeline.jobs["train"]
    at = result.timeline.times
    # trainers exited at 122 s; the job is deleted cleanup_after_s (30 s) later
    assert max(t for t, r in zip(at, series.trainers_running, strict=True) if r) < 123
    assert not series.present[-1]


def test_a_serial_fraction_slows_the_job_and_passes_multiply() -> None:
    work = {"passes": 2, "dataset_samples": 1000, "throughput": {"per_trainer": 10,
            "serial": 1.0}, "noise": 0}
    result = run_policy(parse_scenario(_scenario(work)), "static")
    # serial 1: two trainers do what one does (10/s): 2000 samples = 200 s + 2 s start
    assert result.metrics.jct_by_job["train"] == pytest.approx(202.0)


def test_the_controller_marks_the_finished_job_succeeded() -> None:
    from edl.sim import runner

    statuses: list[str] = []
    original = runner._Run.main

    async def main(self, progress):
        def listen(event, obj, old):
            state = (obj.get("status") or {}).get("state")
            if state and (not statuses or statuses[-1] != state):
                statuses.append(state)

        self.cluster.store.listen("TrainingJob", listen)
        return await original(self, progress)

    work = {"samples": 500, "throughput": {"per_trainer": 10}, "noise": 0}
    runner._Run.main = main
    try:
        run_policy(parse_scenario(_scenario(work)), "default")
    finally:
        runner._Run.main = original
    assert statuses[-1] == "Succeeded", statuses


def test_jobs_without_work_report_the_metrics_of_before() -> None:
    result = run_policy(parse_scenario(_scenario(None)), "default")
    assert not set(WORK_METRIC_KEYS) & set(result.metrics.as_json())
    assert result.metrics.jct_by_job is None


def test_bad_work_is_named_by_its_path() -> None:
    bad = _scenario({"samples": 10, "passes": 2, "dataset_samples": 5,
                     "throughput": {"per_trainer": 1, "points": {1: 2}}})
    with pytest.raises(ScenarioError) as error:
        parse_scenario(bad)
    text = str(error.value)
    assert "training.jobs[0].work" in text
    assert "exactly one of per_trainer or points" in text


@pytest.mark.slow
def test_goodput_finishes_mixed_scaling_sooner_than_default() -> None:
    """The shipped scenario, seed 0: goodput's measured gains hold (docs/performance.md)."""
    from edl.sim.scenario import load_scenario

    scenario = load_scenario("mixed-scaling")
    default = run_policy(scenario, "default").metrics
    goodput = run_policy(scenario, "goodput").metrics
    assert goodput.jct_mean_s <= 0.95 * default.jct_mean_s
    assert goodput.makespan_s <= 1.02 * default.makespan_s
    assert goodput.jobs_never_started == 0 and not goodput.unfinished_names
    assert goodput.service_max_lag_s <= default.service_max_lag_s


def test_a_resize_pause_stops_the_whole_job_once_per_change_of_its_world() -> None:
    """Two trainers join together at 12 s: the first starts the world (no pause), the
    second changes it (a drawn pause of exactly 5 s); 100 s of work then end at 117 s."""
    work = {"samples": 2000, "throughput": {"per_trainer": 10}, "join_cost_s": 10, "noise": 0,
            "resize_pause_s": {"min": 5, "max": 5}}
    result = run_policy(parse_scenario(_scenario(work)), "static")
    assert result.metrics.jct_by_job == {"train": pytest.approx(117.0)}
    with pytest.raises(ScenarioError, match="resize_pause_s: max is below min"):
        parse_scenario(_scenario({**work, "resize_pause_s": {"min": 5, "max": 1}}))
    with pytest.raises(ScenarioError, match=r"resize_pause_s\.max: required"):
        parse_scenario(_scenario({**work, "resize_pause_s": {"min": 5}}))
