"""A scenario played faster or slower: every duration in it multiplied by one factor.

Why: the real-time fidelity check (tests/e2e/test_fidelity.py, docs/fidelity.md) plays a
scenario on a real control plane in wall-clock time. Played at half scale, every
submission, replica change, pod start and termination latency, autoscaler tick and
sample comes twice as fast, so the cluster passes through the same sequence of states in
half the wall time. What does not scale is the control plane's own reaction time (API
round trips, watches, controllers), which is why the factor is a parameter and not a
constant.
"""

from __future__ import annotations

from edl.sim.scenario import Scenario
from edl.sim.training_spec import JobGroup

__all__ = ["scale_time"]


def _group(group: JobGroup, factor: float) -> JobGroup:
    return group.model_copy(update={
        "submit_at": group.submit_at * factor,
        "submit_every": group.submit_every * factor,
        "delete_at": None if group.delete_at is None else group.delete_at * factor,
        "delete_every": group.delete_every * factor,
    })


def scale_time(scenario: Scenario, factor: float) -> Scenario:
    """`scenario` with every time in it (run length, sample interval, autoscaler tick, pod
    start and termination latencies, measurement windows, submission, deletion and
    replica-change times) multiplied by `factor`.

    ValueError for a factor that is not positive, and for jobs with `work`: their
    throughput is samples per second, so a faster clock would change how much they do."""
    if not factor > 0:
        raise ValueError(f"time scale must be positive, not {factor!r}")
    with_work = [group.name for group in scenario.training.jobs if group.work is not None]
    if with_work:
        raise ValueError(f"{scenario.name}: training.jobs: {with_work[0]}: jobs with work "
                         "cannot be time-scaled (their throughput is per second)")
    if factor == 1:
        return scenario
    latency, stop, measure = (scenario.pod_start_latency_s, scenario.termination_s,
                              scenario.measure)
    workloads = [w.model_copy(update={"schedule": [
        step.model_copy(update={"at": step.at * factor}) for step in w.schedule]})
        for w in scenario.workloads]
    return scenario.model_copy(update={
        "duration_s": scenario.duration_s * factor,
        "sample_interval_s": scenario.sample_interval_s * factor,
        "autoscaler": scenario.autoscaler.model_copy(
            update={"interval_s": scenario.autoscaler.interval_s * factor}),
        "pod_start_latency_s": latency.model_copy(
            update={"min": latency.min * factor, "max": latency.max * factor}),
        "termination_s": stop.model_copy(update={
            role: getattr(stop, role) * factor for role in ("trainer", "pserver", "master",
                                                            "other")}),
        "measure": measure.model_copy(update={
            "utilization_until_s": measure.utilization_until_s * factor,
            "steady_state": measure.steady_state.model_copy(update={
                "start": measure.steady_state.start * factor,
                "end": measure.steady_state.end * factor})}),
        "workloads": workloads,
        "training": scenario.training.model_copy(update={
            "jobs": [_group(group, factor) for group in scenario.training.jobs]}),
    })
