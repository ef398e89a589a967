"""The in-process controllers against the upstream algorithms they follow (docs/fidelity.md).

Each test pins one row of docs/fidelity.md: the Job back-off record
(backoff_utils.go), podReplacementPolicy, podFailurePolicy on pods that never ran
or were SIGKILLed, the Job's and the ReplicaSet's choice of pods to delete.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.ranking import job_removal_order, replica_set_removal_order
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.cluster.inproc.workloads import job_backoff_remaining_s, pod_replacement_policy
from edl.jobparser import JobParser

TRAINER = {"edl.dev/job": "demo", "edl.dev/role": "trainer"}


def upstream_remaining(failures: int, last: float, now: float) -> float:
    """getRemainingTimeForFailuresCount, transcribed loop for loop."""
    if failures == 0:
        return 0.0
    backoff = 10.0
    for _ in range(1, failures):
        backoff = backoff * 2
        if backoff >= 600.0:
            backoff = 600.0
            break
    elapsed = now - last
    return 0.0 if backoff < elapsed else backoff - elapsed


@pytest.mark.parametrize(
    ("failures", "expected"), [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (40, 600)]
)
def test_job_backoff_is_ten_seconds_doubling_capped_at_ten_minutes(failures, expected):
    assert job_backoff_remaining_s(failures, 100.0, 100.0) == expected


@given(st.integers(0, 64), st.floats(0, 1e4), st.floats(0, 1e4))
def test_job_backoff_remaining_matches_upstream(failures, last, elapsed):
    assert job_backoff_remaining_s(failures, last, last + elapsed) == pytest.approx(
        upstream_remaining(failures, last, last + elapsed)
    )


def test_replacement_policy_defaults_as_upstream():
    assert pod_replacement_policy({}) == "TerminatingOrFailed"
    assert pod_replacement_policy({"podFailurePolicy": {"rules": []}}) == "Failed"
    assert pod_replacement_policy({"podReplacementPolicy": "Failed"}) == "Failed"


# --------------------------------------------------------------------------- a small cluster


def cluster(clock, start=2.0, termination=3.0, nodes=1, cpu="32", placement="spread"):
    runtime = SimulatedPodRunner(
        clock, start_latency=Fixed(start), termination={"trainer": Fixed(termination)},
        other_termination=Fixed(termination),
    )
    plane = InProcessCluster(clock, runtime, placement=placement)
    for index in range(nodes):
        plane.add_node(f"n{index}", {"cpu": cpu, "memory": "64Gi"})
    return plane


def trainer_job(parallelism: int = 4, max_instance: int = 8) -> dict[str, Any]:
    """The old design: the JobParser's trainer Job (podFailurePolicy: Ignore 143 and
    DisruptionTarget) run by the Job controller (no ``managedBy``)."""
    job = JobParser().parse_to_trainer({
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "fault_tolerant": True,
            "trainer": {"entrypoint": "python train.py", "min-instance": parallelism,
                        "max-instance": max_instance,
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            "pserver": {"min-instance": 1, "max-instance": 1},
        },
    })
    del job["spec"]["managedBy"]
    return job


def plain_job(parallelism: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "demo-trainer"},
        "spec": {"parallelism": parallelism, **spec, "template": {
            "metadata": {"labels": dict(TRAINER)},
            "spec": {"containers": [{"name": "trainer", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi"}}}]},
        }},
    }


def created_times(plane: InProcessCluster) -> list[float]:
    times: list[float] = []
    plane.watch_pods(lambda event, pod: times.append(pod.created_at) if event == "created"
                     else None)
    return times


def job_status(plane: InProcessCluster) -> dict[str, Any]:
    return plane.controllers.with_status(
        "Job", plane.store.get("Job", "default", "demo-trainer"))["status"]


def test_drained_trainers_delay_every_later_scale_up_more_cycle_by_cycle(clock):
    """The defect of issue 10 on the faithful model of the old design: each shrink's
    drained trainers (exit 143, ignored by the podFailurePolicy) still enter the
    back-off record, so each scale-up waits 10 s doubled per earlier drain."""
    plane = cluster(clock)
    created = created_times(plane)
    delays = []

    async def cycles():
        await plane.create_job(trainer_job(parallelism=2))
        await asyncio.sleep(20)
        for _ in range(4):
            victim = next(p for p in plane.pod_records() if p.phase == "Running")
            plane.scale("Job", "default", "demo-trainer", 1)
            plane.delete_pod("default", victim.name)
            await asyncio.sleep(10)  # drained (3 s) and gone
            before = len(created)
            up = clock.now()
            plane.scale("Job", "default", "demo-trainer", 2)
            while len(created) == before:
                await asyncio.sleep(0.5)
            delays.append(created[-1] - up)
            await asyncio.sleep(5)

    clock.run(cycles())
    # failure k: 10 s * 2^(k-1) after the exit, which came 7 s before the scale-up
    assert delays == pytest.approx([3.0, 13.0, 33.0, 73.0], abs=0.6)
    assert job_status(plane)["failed"] == 0  # none counted against backoffLimit


def test_a_success_resets_the_backoff_record(clock):
    runtime = SimulatedPodRunner(clock, start_latency=Fixed(1), run_time={"trainer": Fixed(50)},
                                  termination={"trainer": Fixed(1)})
    plane = InProcessCluster(clock, runtime)
    plane.add_node("n", {"cpu": "32", "memory": "64Gi"})

    async def scenario():
        await plane.create_job(plain_job(2, completions=10))
        await asyncio.sleep(5)
        for pod in list(plane.pod_records()):
            plane.delete_pod("default", pod.name)
        await asyncio.sleep(1)
        owner = plane._owners[("Job", "default", "demo-trainer")]
        after_failures = owner.failures_after_success
        await asyncio.sleep(80)  # replacements ran 50 s and succeeded
        return after_failures, owner.failures_after_success, owner.succeeded

    failures, after_success, succeeded = clock.run(scenario())
    assert failures == 2 and succeeded >= 1 and after_success == 0


def test_terminating_or_failed_counts_and_replaces_at_deletion(clock):
    plane = cluster(clock, termination=25.0)
    created = created_times(plane)

    async def scenario():
        await plane.create_job(plain_job(1))
        await asyncio.sleep(5)
        (pod,) = plane.pod_records()
        plane.delete_pod("default", pod.name)
        deleted = clock.now()
        await asyncio.sleep(15)
        return deleted, job_status(plane)

    deleted, status = clock.run(scenario())
    assert status["failed"] == 1 and status["terminating"] == 1
    assert created[-1] == pytest.approx(deleted + 10.0)  # back-off, not the 25 s termination


def test_replacement_policy_failed_waits_for_the_terminating_pod(clock):
    plane = cluster(clock, termination=25.0)
    created = created_times(plane)

    async def scenario():
        await plane.create_job(trainer_job(parallelism=1))
        await asyncio.sleep(5)
        (pod,) = plane.pod_records()
        plane.delete_pod("default", pod.name)
        deleted = clock.now()
        await asyncio.sleep(15)
        mid = job_status(plane), len(created)
        await asyncio.sleep(30)
        return deleted, mid

    deleted, (status, count) = clock.run(scenario())
    assert count == 1 and status["active"] == 0 and status["terminating"] == 1
    # exit 143 at +25 s (ignored for backoffLimit, but in the record): replacement 10 s later
    assert created[-1] == pytest.approx(deleted + 25.0 + 10.0)
    assert job_status(plane)["failed"] == 0


@pytest.mark.parametrize("when", ["unbound", "starting", "killed after grace"])
def test_pods_that_never_ran_or_were_sigkilled_are_counted(clock, when):
    """No terminated state (deleted before its containers started) or exit 137 (still
    running after terminationGracePeriodSeconds): no Ignore rule matches."""
    plane = cluster(clock, start=5.0, termination=60.0, cpu="1" if when == "unbound" else "32")

    async def scenario():
        job = trainer_job(parallelism=1)
        await plane.create_job(job)
        if when == "unbound":
            plane.scale("Job", "default", "demo-trainer", 2)  # the second cannot fit
        await asyncio.sleep(1 if when != "killed after grace" else 10)
        pods = sorted(plane.pod_records(), key=lambda p: p.seq)
        victim = pods[-1]
        assert (victim.node is None) == (when == "unbound")
        plane.scale("Job", "default", "demo-trainer", 1 if when == "unbound" else 0)
        plane.delete_pod("default", victim.name)
        await asyncio.sleep(40)

    clock.run(scenario())
    assert job_status(plane)["failed"] == 1


def test_the_job_deletes_unscheduled_then_pending_then_the_newest_ready(clock):
    plane = cluster(clock, start=4.0, cpu="4")

    async def scenario():
        await plane.create_job(plain_job(2))
        await asyncio.sleep(5)  # two running (ready at t=4)
        plane.scale("Job", "default", "demo-trainer", 3)
        await asyncio.sleep(30)  # the third is ready 30 s after the first two
        plane.scale("Job", "default", "demo-trainer", 6)  # 1 starting, 2 unbound (4 cpus)
        await asyncio.sleep(1)
        return sorted(plane.pod_records(), key=lambda p: p.seq)

    pods = clock.run(scenario())
    order = job_removal_order(pods)
    unbound = [p for p in pods if p.node is None]
    starting = [p for p in pods if p.node is not None and p.phase == "Pending"]
    running = sorted((p for p in pods if p.phase == "Running"), key=lambda p: -p.running_at)
    assert len(unbound) == 2 and len(starting) == 1 and len(running) == 3
    assert order[:2] == sorted(unbound, key=lambda p: -p.seq)
    assert order[2:3] == starting
    assert order[3] is running[0]  # ready for the shortest time


def test_replica_set_deletes_cheapest_then_doubled_up_then_newest_bucket(clock):
    plane = cluster(clock, start=1.0, nodes=2, cpu="8")

    async def scenario():
        await plane.create_replica_set({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
        })
        await asyncio.sleep(100)
        return sorted(plane.pod_records(), key=lambda p: p.seq)

    pods = clock.run(scenario())
    by_node: dict[str, list] = {}
    for pod in pods:
        by_node.setdefault(pod.node, []).append(pod)
    crowded = max(by_node.values(), key=len)
    assert len(crowded) == 2  # spread: 2 + 1
    lonely = next(v for v in by_node.values() if len(v) == 1)[0]
    order = replica_set_removal_order(pods, pods, clock.now())
    assert order[0] in crowded  # doubled up first
    lonely.manifest["metadata"]["annotations"] = {
        "controller.kubernetes.io/pod-deletion-cost": "-5"}
    assert replica_set_removal_order(pods, pods, clock.now())[0] is lonely
    crowded[0].manifest["metadata"]["annotations"] = {
        "controller.kubernetes.io/pod-deletion-cost": "-9"}
    assert replica_set_removal_order(pods, pods, clock.now())[0] is crowded[0]
    lonely.manifest["metadata"]["annotations"] = {
        "controller.kubernetes.io/pod-deletion-cost": "not a number"}  # invalid: 0
    assert replica_set_removal_order(pods, pods, clock.now())[-1] is lonely


def test_replica_set_scale_down_follows_the_deletion_cost(clock):
    plane = cluster(clock, start=1.0)

    async def scenario():
        await plane.create_replica_set({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 4, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
        })
        await asyncio.sleep(10)
        oldest = min(plane.pod_records(), key=lambda p: p.seq)
        oldest.manifest["metadata"]["annotations"] = {
            "controller.kubernetes.io/pod-deletion-cost": "-100"}
        plane.scale("ReplicaSet", "default", "web", 3)
        await asyncio.sleep(0)
        return oldest

    oldest = clock.run(scenario())
    assert plane.pods.by_key[("default", oldest.name)].terminating


# --------------------------------------------------------------------------- scheduler scores


def upstream_score(alloc_cpu, alloc_mem, req_cpu, req_mem, strategy):
    """NodeResourcesFit (least/mostRequestedScore, weighted mean) + BalancedAllocation,
    written out per node as in pkg/scheduler/framework/plugins/noderesources."""
    def resource(requested, capacity):
        if capacity == 0 or requested > capacity:
            return 0
        if strategy == "spread":
            return (capacity - requested) * 100 // capacity
        return requested * 100 // capacity

    scores = [(resource(req_cpu, alloc_cpu), alloc_cpu), (resource(req_mem, alloc_mem), alloc_mem)]
    weighted = [score for score, capacity in scores if capacity > 0]
    fit = sum(weighted) // len(weighted) if weighted else 0
    if alloc_cpu and alloc_mem:
        std = abs(min(req_cpu / alloc_cpu, 1) - min(req_mem / alloc_mem, 1)) / 2
    else:
        std = 0.0
    return fit + int((1 - std) * 100)


nodes_strategy = st.lists(
    st.tuples(st.integers(1, 64), st.integers(1, 256), st.integers(0, 64), st.integers(0, 256)),
    min_size=1, max_size=12,
)


@given(nodes_strategy, st.integers(0, 8000), st.integers(0, 16000),
       st.sampled_from(["spread", "binpack"]))
def test_scheduler_binds_to_a_highest_scoring_feasible_node(nodes, cpu, memory, placement):
    from edl.cluster.inproc.scheduler import Node, NodeIndex

    index = NodeIndex(placement, seed=1)
    for i, (cores, gib, used_cpu, used_gib) in enumerate(nodes):
        node = Node(f"n{i}", i, cores * 1000, gib * 1000, 0)
        index.add(node)
        index.take(node, min(used_cpu * 250, node.cpu_milli), min(used_gib * 500,
                   node.memory_mega), 0)
    feasible = [n for n in index.nodes
                if n.free_cpu_milli >= cpu and n.free_memory_mega >= memory]
    chosen = index.find(cpu, memory, 0)
    if not feasible:
        assert chosen is None
        return
    def score(n):
        return upstream_score(n.cpu_milli, n.memory_mega, n.cpu_milli - n.free_cpu_milli + cpu,
                              n.memory_mega - n.free_memory_mega + memory, placement)
    assert chosen in feasible
    assert score(chosen) == max(score(n) for n in feasible)


def test_spread_prefers_the_balanced_node_and_binpack_the_fullest():
    from edl.cluster.inproc.scheduler import Node, NodeIndex

    def build(placement):
        index = NodeIndex(placement)
        a, b, c = (Node(name, i, 16000, 64000, 0) for i, name in enumerate("abc"))
        for node in (a, b, c):
            index.add(node)
        index.take(a, 8000, 8000, 0)   # half the CPU, little memory: unbalanced
        index.take(b, 4000, 16000, 0)  # a quarter of both: balanced, emptier
        index.take(c, 12000, 48000, 0)  # three quarters of both: the fullest
        return index

    assert build("spread").find(1000, 1000, 0).name == "b"
    assert build("binpack").find(1000, 1000, 0).name == "c"
