"""The sampled history of one simulation run, as plain columns.

The runner appends one row every ``sample_interval_s`` of virtual time; metrics and
plots are pure functions of this data, so they are tested on hand-made timelines.
Every series of a job or workload is aligned with ``Timeline.times``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JobSeries:
    """One TrainingJob over time; rows before its submission read as absent."""

    present: list[bool] = field(default_factory=list)  # submitted and not yet deleted
    pods_created: list[bool] = field(default_factory=list)  # any of its pods created by now
    trainers_running: list[int] = field(default_factory=list)  # Running, not terminating
    trainers_desired: list[int] = field(default_factory=list)  # trainer Job parallelism


@dataclass
class WorkloadSeries:
    """Another workload (a Deployment) over time."""

    desired: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)  # Running, not terminating


@dataclass
class Timeline:
    """Samples of a run: cluster CPU, each job and each workload."""

    times: list[float] = field(default_factory=list)
    cpu_running_milli: list[int] = field(default_factory=list)  # requests of Running pods
    cpu_allocatable_milli: list[int] = field(default_factory=list)
    jobs: dict[str, JobSeries] = field(default_factory=dict)
    workloads: dict[str, WorkloadSeries] = field(default_factory=dict)
    # jobs with work (sim/work.py): when each was submitted and when its work ended
    work_submitted: dict[str, float] = field(default_factory=dict)
    work_finished: dict[str, float] = field(default_factory=dict)
    work_resizes: dict[str, int] = field(default_factory=dict)  # parallelism changes while running
    # per node pool (node group), when the recorder knows them: CPU requests of Running
    # pods per sample, and the pool's allocatable CPU
    cpu_running_by_pool: dict[str, list[int]] = field(default_factory=dict)
    cpu_allocatable_by_pool: dict[str, int] = field(default_factory=dict)

    def utilization_pct(self) -> list[float]:
        """CPU utilisation per sample, as the original defined it."""
        return [
            100.0 * used / total if total else 0.0
            for used, total in zip(self.cpu_running_milli, self.cpu_allocatable_milli, strict=True)
        ]

    def pending_jobs(self) -> list[int]:
        """Jobs that exist but have no running trainer, per sample."""
        counts = [0] * len(self.times)
        for series in self.jobs.values():
            for index, (present, running) in enumerate(
                zip(series.present, series.trainers_running, strict=True)
            ):
                if present and running == 0:
                    counts[index] += 1
        return counts
