"""The Controller against the in-process control plane, on virtual time."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edl.control.controller import Controller


class RecordingAutoscaler:
    """Records what the Controller tells the Autoscaler."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, job):
        self.events.append(("add", job.metadata.name))

    def on_update(self, job):
        self.events.append(("update", job.metadata.name))

    def on_del(self, job):
        self.events.append(("del", job.metadata.name))


def children(cluster, name):
    found = {}
    for kind, child in [
        ("Service", f"{name}-master"),
        ("ReplicaSet", f"{name}-master"),
        ("ReplicaSet", f"{name}-pserver"),
        ("Job", f"{name}-trainer"),
    ]:
        obj = cluster.store.peek(kind, "default", child)
        if obj is not None:
            meta = obj["metadata"]
            # the trainer Job's status is the trainer controller's to refresh (managedBy):
            # its identity and spec are what must not change
            version = (meta["uid"], meta["generation"]) if kind == "Job" else meta[
                "resourceVersion"]
            found[(kind, child)] = version
    return found


def test_creates_children_idempotently_and_reports_status(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16", start=2.0)
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener, status_interval=1.0)
    stored = cluster.create_training_job(manifests.training_job("mnist", 2, 6))

    async def scenario():
        await controller.on_add(stored)
        first = children(cluster, "mnist")
        await controller.on_add(stored)  # a replayed event changes nothing
        second = children(cluster, "mnist")
        early = cluster.get_training_job("default", "mnist")["status"]
        task = asyncio.create_task(controller.run())
        await asyncio.sleep(5)
        task.cancel()
        return first, second, early

    first, second, early = clock.run(scenario())
    assert len(first) == 4
    assert first == second
    assert early["state"] == "Created"
    status = cluster.get_training_job("default", "mnist")["status"]
    assert status["state"] == "Running"
    assert status["trainers"] == {"desired": 2, "running": 2, "pending": 0}
    pserver = cluster.replica_counts("ReplicaSet", "default", "mnist-pserver")
    assert pserver.running == 1
    assert listener.events[0] == ("add", "mnist")
    assert ("del", "mnist") not in listener.events


def test_bad_job_fails_with_the_message_and_the_controller_carries_on(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=2, cpu="16")
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener, status_interval=1.0)
    bad = manifests.training_job("broken", 2, 6)
    bad["spec"]["trainer"]["min-instance"] = 9  # above max-instance
    bad["spec"]["trainer"]["resources"]["requests"]["cpu"] = "lots"

    async def scenario():
        task = asyncio.create_task(controller.run())
        await asyncio.sleep(0)
        cluster.create_training_job(bad)
        await asyncio.sleep(1)
        cluster.create_training_job(manifests.training_job("good", 2, 6))
        await asyncio.sleep(5)
        task.cancel()

    clock.run(scenario())
    status = cluster.get_training_job("default", "broken")["status"]
    assert status["state"] == "Failed"
    assert "spec.trainer" in status["message"] and "min-instance" in status["message"]
    assert "lots" in status["message"]
    assert children(cluster, "broken") == {}
    assert len(children(cluster, "good")) == 4
    assert cluster.get_training_job("default", "good")["status"]["state"] == "Running"
    assert [event for event in listener.events if event[1] == "broken"] == []


def test_fixing_a_bad_job_creates_it_and_deleting_removes_children(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=2, cpu="16", termination=2.0)
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener, status_interval=1.0)
    bad = manifests.training_job("job", 2, 6)
    bad["spec"]["trainer"]["max-instance"] = 1

    async def scenario():
        task = asyncio.create_task(controller.run())
        await asyncio.sleep(0)
        cluster.create_training_job(bad)
        await asyncio.sleep(1)
        failed = cluster.get_training_job("default", "job")["status"]["state"]
        fixed = cluster.get_training_job("default", "job")
        fixed["spec"]["trainer"]["max-instance"] = 6
        cluster.replace_training_job(fixed)
        await asyncio.sleep(5)
        running = cluster.get_training_job("default", "job")["status"]["state"]
        cluster.delete_training_job("default", "job")
        await asyncio.sleep(5)
        task.cancel()
        return failed, running

    failed, running = clock.run(scenario())
    assert (failed, running) == ("Failed", "Running")
    assert children(cluster, "job") == {}
    assert list(cluster.pod_records()) == []
    assert listener.events == [("add", "job"), ("del", "job")]


def test_status_writes_do_not_loop_back(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener, status_interval=1.0)

    async def scenario():
        task = asyncio.create_task(controller.run())
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("quiet", 2, 6))
        await asyncio.sleep(30)
        task.cancel()

    clock.run(scenario())
    assert listener.events == [("add", "quiet")]


def test_a_restarted_controller_adopts_existing_children(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")

    async def scenario():
        first = Controller(cluster, status_interval=1.0)
        task = asyncio.create_task(first.run())
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("kept", 2, 6))
        await asyncio.sleep(10)
        task.cancel()
        before = children(cluster, "kept")
        pods_before = {pod.name for pod in cluster.pod_records()}
        listener = RecordingAutoscaler()
        second = Controller(cluster, listener, status_interval=1.0)  # a new process, same cluster
        task = asyncio.create_task(second.run())
        await asyncio.sleep(10)
        task.cancel()
        return before, pods_before, listener.events

    before, pods_before, events = clock.run(scenario())
    assert children(cluster, "kept") == before  # nothing re-created or rewritten
    assert {pod.name for pod in cluster.pod_records()} == pods_before
    assert events == [("add", "kept")]  # the new autoscaler still learns about the job
    assert cluster.get_training_job("default", "kept")["status"]["state"] == "Running"


def test_children_go_with_their_job_even_without_a_controller(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16", termination=1.0)
    controller = Controller(cluster)
    stored = cluster.create_training_job(manifests.training_job("orphan", 2, 6))

    async def scenario():
        await controller.on_add(stored)  # children carry ownerReferences to the job
        await asyncio.sleep(5)
        cluster.delete_training_job("default", "orphan")  # no controller hears of it
        await asyncio.sleep(5)

    clock.run(scenario())
    assert children(cluster, "orphan") == {}
    assert list(cluster.pod_records()) == []


# JSON-like values of any shape, and TrainingJob-ish mappings whose parts have odd shapes.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8,
)
_odd_jobs = st.fixed_dictionaries(
    {"metadata": st.one_of(_json, st.fixed_dictionaries({"name": st.just("odd")},
                                                        optional={"generation": _json,
                                                                  "namespace": _json}))},
    optional={"spec": _json, "status": _json, "apiVersion": _json, "kind": _json},
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objects=st.lists(_json | _odd_jobs, min_size=1, max_size=4))
def test_no_object_shape_crashes_the_controller(clock, cluster_factory, manifests, objects):
    cluster = cluster_factory(nodes=1, cpu="16")  # a fresh cluster per example, same clock
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener, status_interval=1.0)

    async def scenario():
        for obj in objects:
            for handler in (controller.on_add, controller.on_update, controller.on_del):
                await handler(obj)  # must not raise
        await controller.tick()
        good = cluster.create_training_job(manifests.training_job("good", 1, 2))
        await controller.on_add(good)  # and it still does its job afterwards

    clock.run(scenario())
    assert ("add", "good") in listener.events
    assert children(cluster, "good")
    assert all(name == "good" for _, name in listener.events)  # odd objects never reach it


def test_watch_training_jobs_delivers_existing_and_new_jobs_until_unsubscribed(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=2, cpu="16")
    listener = RecordingAutoscaler()
    controller = Controller(cluster, listener)
    cluster.create_training_job(manifests.training_job("before", 1, 2))

    async def scenario():
        unsubscribe = controller.watch_training_jobs()
        await asyncio.sleep(1)
        cluster.create_training_job(manifests.training_job("during", 1, 2))
        await asyncio.sleep(1)
        unsubscribe()
        cluster.create_training_job(manifests.training_job("after", 1, 2))
        await asyncio.sleep(1)

    clock.run(scenario())
    assert [name for _, name in listener.events] == ["before", "during"]
