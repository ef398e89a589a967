"""Rebuilding a timeline from a watch log (pure, no cluster): each grid point holds every
event that arrived at or before it, and is summarised as the simulator's sampler does."""

from __future__ import annotations

from e2e.fidelity_replay import replay, start_latencies
from e2e.watch_record import Event

START = 100.0  # the monotonic time of t = 0


def pod(phase: str | None, node: str = "", deleting: bool = False, cpu: str = "2",
        uid: str = "u1", job: str = "j", namespace: str = "default") -> dict:
    meta: dict = {"uid": uid, "name": f"{job}-trainer-{uid}", "namespace": namespace,
                  "labels": {"edl.dev/job": job, "edl.dev/role": "trainer"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:09Z"
    status: dict = {"phase": phase} if phase else {}
    if phase == "Running":
        status |= {"startTime": "2026-12-01T00:00:03Z", "conditions": [
            {"type": "PodScheduled", "status": "True",
             "lastTransitionTime": "2026-12-01T00:00:01Z"}]}
    return {"metadata": meta, "status": status,
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}


def named(name: str, namespace: str = "default", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def at(t: float, kind: str, type_: str, obj) -> Event:
    return Event(START + t, kind, type_, obj)


def test_states_on_the_grid_follow_the_arrival_times() -> None:
    events = [
        at(-5, "TrainingJob", "ADDED", named("j")),
        at(0.2, "Job", "ADDED", named("j-trainer", parallelism=1)),
        at(0.5, "Pod", "ADDED", pod("Pending")),
        at(1.2, "Pod", "MODIFIED", pod("Pending", node="n1")),
        at(1.9, "Pod", "MODIFIED", pod("Running", node="n1")),
        at(3.0, "Job", "MODIFIED", named("j-trainer", parallelism=0)),
        at(3.2, "Pod", "MODIFIED", pod("Running", node="n1", deleting=True)),
        at(4.6, "Pod", "DELETED", pod("Running", node="n1", deleting=True)),
        at(5.5, "Deployment", "ADDED", named("web", replicas=3)),
    ]
    samples = replay(events, START, [0, 1, 2, 3, 4, 5, 6], cpu_total=10_000)
    assert [s.trainers["j"].running for s in samples] == [0, 0, 1, 1, 0, 0, 0]
    assert [s.trainers["j"].desired for s in samples] == [0, 1, 1, 0, 0, 0, 0]
    # a terminating pod holds its CPU until it is gone, as in the simulator
    assert [s.running_cpu_request_milli for s in samples] == [0, 0, 2000, 2000, 2000, 0, 0]
    assert [s.unbound_pods for s in samples] == [0, 1, 0, 0, 0, 0, 0]
    assert [s.trainers["j"].first_pod_at is not None for s in samples] == [
        False, True, True, True, True, True, True]
    assert "web" not in samples[5].deployments and samples[6].deployments["web"].desired == 3
    assert start_latencies(events) == {"u1": 2.0}


def test_a_resync_replaces_the_kind_and_namespaces_key_the_jobs() -> None:
    events = [
        at(0, "TrainingJob", "ADDED", named("r", namespace="research")),
        at(0.1, "Pod", "ADDED", pod("Running", node="n", uid="a", job="r",
                                    namespace="research")),
        at(0.2, "Pod", "ADDED", pod("Running", node="n", uid="b", job="r",
                                    namespace="research")),
        at(1.5, "Pod", "RESYNC", [pod("Running", node="n", uid="b", job="r",
                                      namespace="research")]),
    ]
    first, second = replay(events, START, [1, 2], cpu_total=1000)
    assert first.trainers["research/r"].running == 2
    assert second.trainers["research/r"].running == 1
