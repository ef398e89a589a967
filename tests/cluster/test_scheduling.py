"""Scheduler and pod lifecycle of the in-process control plane, on virtual time."""

from __future__ import annotations

import asyncio

import pytest

from edl.cluster.inproc.clock import VirtualClock, VirtualTimeDeadlock
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner


def phases(cluster, prefix: str) -> dict[str, tuple[str, str | None, bool]]:
    """name -> (phase, node, terminating) of the live pods whose name starts with prefix."""
    return {
        pod.name: (pod.phase, pod.node, pod.terminating)
        for pod in cluster.pod_records()
        if pod.name.startswith(prefix)
    }


def test_pods_bind_by_requests_and_the_rest_stay_pending(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="8")

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("web", 5, "3"))
        await asyncio.sleep(10)

    clock.run(scenario())
    pods = phases(cluster, "web-")
    assert len(pods) == 5
    bound = [p for p in pods.values() if p[1] is not None]
    assert len(bound) == 4  # two 3-CPU pods per 8-CPU node
    assert all(phase == "Running" for phase, node, _ in bound)
    unbound = [p for p in pods.values() if p[1] is None]
    assert unbound == [("Pending", None, False)]
    for node in cluster.node_names():
        assert cluster.node_room(node)[0] == 2000
    replicas = cluster.replica_counts("ReplicaSet", "default", "web")
    assert (replicas.desired, replicas.running, replicas.pending) == (5, 4, 1)


@pytest.mark.parametrize(("placement", "distinct_nodes"), [("spread", 2), ("binpack", 1)])
def test_placement_strategy(clock, cluster_factory, manifests, placement, distinct_nodes):
    cluster = cluster_factory(nodes=2, cpu="8", placement=placement)

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("small", 2, "1"))
        await asyncio.sleep(1)

    clock.run(scenario())
    nodes = {node for _, node, _ in phases(cluster, "small-").values()}
    assert len(nodes) == distinct_nodes


def test_deleted_pod_holds_its_room_until_it_exits_then_pending_pod_binds(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=1, cpu="8", start=2.0, termination=5.0)
    seen = {}

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("a", 2, "4"))
        await asyncio.sleep(3)
        await cluster.create_replica_set(manifests.replica_set("b", 1, "4"))
        await asyncio.sleep(1)
        seen["b before"] = phases(cluster, "b-")
        cluster.scale("ReplicaSet", "default", "a", 1)  # at t=4
        await asyncio.sleep(4.9)  # t=8.9: the deleted pod still terminating
        seen["a terminating"] = phases(cluster, "a-")
        seen["b during"] = phases(cluster, "b-")
        seen["room during"] = cluster.node_room("node-0")[0]
        await asyncio.sleep(0.2)  # t=9.1: it exited at t=9, b is bound and starting
        seen["b after"] = phases(cluster, "b-")
        await asyncio.sleep(2)
        seen["b running"] = phases(cluster, "b-")

    clock.run(scenario())
    assert list(seen["b before"].values()) == [("Pending", None, False)]
    terminating = [p for p in seen["a terminating"].values() if p[2]]
    assert terminating == [("Running", "node-0", True)]
    assert list(seen["b during"].values()) == [("Pending", None, False)]
    assert seen["room during"] == 0
    assert list(seen["b after"].values()) == [("Pending", "node-0", False)]
    assert list(seen["b running"].values()) == [("Running", "node-0", False)]


def test_termination_is_capped_by_the_grace_period(clock, manifests):
    pod_runner = SimulatedPodRunner(clock, start_latency=Fixed(1), other_termination=Fixed(30))
    from edl.cluster.inproc.cluster import InProcessCluster

    cluster = InProcessCluster(clock, pod_runner)
    cluster.add_node("n", {"cpu": "4", "memory": "8Gi"})
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    exits = []
    cluster.watch_pods(lambda event, rec: exits.append(clock.now()) if event == "exited" else None)

    async def scenario():
        cluster.create_pod(pod)
        await asyncio.sleep(5)
        cluster.delete_pod("default", "p")
        await asyncio.sleep(40)

    clock.run(scenario())
    assert exits == [pytest.approx(7.0)]


def test_job_scale_down_deletes_unscheduled_then_pending_then_newest_running(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=1, cpu="8", start=2.0, termination=1.0)
    deleted: list[tuple[str, str, bool]] = []  # (name, phase, bound) when deleted

    def on_pod(event, pod):
        if event == "deleting":
            deleted.append((pod.name, pod.phase, pod.node is not None))

    cluster.watch_pods(on_pod)

    async def scale(parallelism):
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        job["spec"]["parallelism"] = parallelism
        await cluster.update_trainer_job(job)
        await asyncio.sleep(0)

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 2, "2"))
        await asyncio.sleep(3)  # the first two (j-trainer-00000, -00001) are Running
        await scale(3)
        await asyncio.sleep(1)  # -00002 bound and starting
        await scale(5)  # -00003 fits (8 CPU), -00004 does not
        await asyncio.sleep(0.5)
        assert (await cluster.job_pods({"metadata": {"name": "j"}})) == (5, 2, 3, 1, 0)
        await scale(4)
        await scale(2)
        await scale(1)
        await asyncio.sleep(0.5)  # -00001 is terminating (1 s), still Running on its node
        leaving = await cluster.job_pods({"metadata": {"name": "j"}})
        assert (leaving.total, leaving.running, leaving.terminating) == (1, 1, 1)
        await asyncio.sleep(5)

    clock.run(scenario())
    assert deleted[0] == ("j-trainer-00004", "Pending", False)  # unscheduled first
    # then the pending (starting) ones, newest first; then the newest running one
    assert [name for name, _, _ in deleted[1:]] == [
        "j-trainer-00003",
        "j-trainer-00002",
        "j-trainer-00001",
    ]
    assert [phase for _, phase, _ in deleted[1:]] == ["Pending", "Pending", "Running"]
    assert {pod.name for pod in cluster.pod_records()} == {"j-trainer-00000"}


def test_unscheduled_pods_are_retried_when_a_node_joins(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=1, cpu="4")
    alarms = []
    cluster.watch_unschedulable(lambda: alarms.append(clock.now()))

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("big", 3, "3"))
        await asyncio.sleep(5)
        assert cluster.replica_counts("ReplicaSet", "default", "big").running == 1
        cluster.add_node("late", {"cpu": "8", "memory": "32Gi"})
        await asyncio.sleep(5)

    clock.run(scenario())
    counts = cluster.replica_counts("ReplicaSet", "default", "big")
    assert (counts.running, counts.pending) == (3, 0)
    assert alarms == [0.0]  # one alarm for the pass in which pods first failed to fit


def test_trainer_exit_zero_completes_a_job_without_completions(clock, manifests):
    from edl.cluster.inproc.cluster import InProcessCluster

    pod_runner = SimulatedPodRunner(
        clock, start_latency=Fixed(1), run_time={"trainer": Fixed(10)}
    )
    cluster = InProcessCluster(clock, pod_runner)
    cluster.add_node("n", {"cpu": "16", "memory": "32Gi"})

    async def scenario():
        await cluster.create_job(manifests.batch_job("j-trainer", 3, "1"))
        await asyncio.sleep(30)
        return await cluster.get_trainer_job_by_name("default", "j-trainer")

    job = clock.run(scenario())
    assert job["status"]["succeeded"] == 3
    assert job["status"]["active"] == 0
    assert job["status"]["conditions"][0]["type"] == "Complete"
    assert list(cluster.pod_records()) == []


def test_failed_pods_are_replaced_after_a_growing_back_off(clock, manifests):
    from edl.cluster.inproc.cluster import InProcessCluster

    class Crashing(SimulatedPodRunner):
        """Pods of the `crash` ReplicaSet exit 1 one second after they start."""

        def start(self, pod, on_running, on_exit):
            if pod["metadata"]["name"].startswith("crash-"):
                self.clock.call_later(1, on_exit, 1)
            else:
                super().start(pod, on_running, on_exit)

    cluster = InProcessCluster(clock, Crashing(clock, start_latency=Fixed(1)))
    cluster.add_node("n", {"cpu": "16", "memory": "32Gi"})
    created = []

    def on_pod(event, pod):
        if event == "created":
            created.append((pod.name[:5], clock.now()))

    cluster.watch_pods(on_pod)

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("crash", 1, "1"))
        await cluster.create_job(manifests.batch_job("j-trainer", 2, "1"))
        await asyncio.sleep(100)
        return await cluster.get_trainer_job_by_name("default", "j-trainer")

    job = clock.run(scenario())
    assert job["status"]["failed"] == 0 and job["status"]["active"] == 2
    crash_times = [when for name, when in created if name == "crash"]
    # fails 1 s after each creation; replaced after 10 s, then 20 s, then 40 s
    assert crash_times == [0.0, 11.0, 32.0, 73.0]


def test_deleting_an_owner_deletes_its_pods(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=1, cpu="8", termination=3.0)

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("web", 2, "1"))
        await asyncio.sleep(5)
        await cluster.delete_replica_set("default", "web")
        await asyncio.sleep(1)
        during = phases(cluster, "web-")
        await asyncio.sleep(3)
        return during

    during = clock.run(scenario())
    assert all(terminating for _, _, terminating in during.values()) and len(during) == 2
    assert phases(cluster, "web-") == {}
    assert cluster.node_room("node-0")[0] == 8000


def test_virtual_time_jumps_and_reports_a_deadlock():
    clock = VirtualClock()
    try:
        order = []
        clock.call_later(5, order.append, "five")
        clock.call_at(2, order.append, "two")
        clock.run_until(10)
        assert order == ["two", "five"]
        assert clock.now() == 10

        async def wait_forever():
            await asyncio.Event().wait()

        with pytest.raises(VirtualTimeDeadlock):
            clock.run(wait_forever())
    finally:
        clock.close()
