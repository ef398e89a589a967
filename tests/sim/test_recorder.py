"""The runner's recorder: series that appear late or vanish stay aligned with the times."""

from __future__ import annotations

from edl.cluster.inproc.cluster import ClusterSample, ReplicaCounts, TrainerCounts
from edl.sim.runner import Recorder


def sample(
    t: float, trainers: dict[str, TrainerCounts], web: ReplicaCounts | None
) -> ClusterSample:
    return ClusterSample(
        time=t, cpu_total_milli=1000, running_cpu_request_milli=int(100 * t),
        requested_cpu_milli=0, running_pods=0, pending_pods=0, unbound_pods=0,
        trainers=trainers, deployments={} if web is None else {"web": web},
    )


def counts(running: int, desired: int, first_pod_at: float | None) -> TrainerCounts:
    return TrainerCounts(desired, running, 0, 0, first_pod_at, None)


def test_late_and_deleted_series_are_padded() -> None:
    recorder = Recorder({"a": "a", "team/b": "b"})
    recorder.record(0.0, sample(0.0, {}, None))
    recorder.record(1.0, sample(1.0, {"a": counts(0, 2, 1.0)}, ReplicaCounts(3, 1, 2, 0)))
    recorder.record(2.0, sample(2.0, {"a": counts(2, 2, 1.0), "team/b": counts(0, 1, None)},
                                ReplicaCounts(3, 3, 0, 0)))
    recorder.record(3.0, sample(3.0, {"team/b": counts(1, 1, 2.5)}, ReplicaCounts(3, 3, 0, 0)))
    timeline = recorder.timeline
    assert timeline.times == [0.0, 1.0, 2.0, 3.0]
    assert timeline.cpu_running_milli == [0, 100, 200, 300]
    a, b = timeline.jobs["a"], timeline.jobs["b"]
    assert a.present == [False, True, True, False]  # deleted before t = 3
    assert a.trainers_running == [0, 0, 2, 0]
    assert a.pods_created == [False, True, True, True]  # sticky once created
    assert b.present == [False, False, True, True]
    assert b.pods_created == [False, False, False, True]
    assert b.trainers_desired == [0, 0, 1, 1]
    web = timeline.workloads["web"]
    assert web.desired == [0, 3, 3, 3] and web.running == [0, 1, 3, 3]
