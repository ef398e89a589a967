"""The Autoscaler with the Controller on the in-process control plane, on virtual time."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from control.grown import grow_six_trainers, loops
from edl.api.names import ANNOTATION_TRAINER_PLACEMENT
from edl.cluster.inproc import InProcessCluster, SimulatedPodRunner, Uniform, VirtualClock
from edl.cluster.port import ConflictError
from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller

NEVER = 10_000.0  # a periodic interval long enough that only events can cause ticks


def start_loops(cluster, interval=NEVER, policy="default"):
    autoscaler = Autoscaler(cluster, policy=policy, interval=interval)
    controller = Controller(cluster, autoscaler, status_interval=1.0)
    tasks = [asyncio.create_task(autoscaler.run()), asyncio.create_task(controller.run())]
    return autoscaler, tasks


async def parallelism(cluster, name):
    job = await cluster.get_trainer_job_by_name("default", f"{name}-trainer")
    return job["spec"]["parallelism"]


def test_a_new_job_is_scaled_up_at_once_not_on_the_next_interval(
    clock, cluster_factory, manifests
):
    cluster = cluster_factory(nodes=2, cpu="16")

    async def scenario():
        autoscaler, tasks = start_loops(cluster)
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("grow", 2, 8, cpu="2"))
        await asyncio.sleep(0.5)
        scaled = await parallelism(cluster, "grow")
        await asyncio.sleep(20)
        for task in tasks:
            task.cancel()
        return scaled, autoscaler.ticks

    scaled, ticks = clock.run(scenario())
    assert scaled > 2  # grown within half a second, with no periodic tick due for hours
    assert cluster.trainer_counts("default", "grow").running == 8
    assert ticks < 20  # ticks come from events, not from a busy loop


def test_pending_service_pods_get_room_within_seconds(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=4, cpu="16", start=2.0, termination=2.0)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx"},
        "spec": {"replicas": 2, "template": manifests.pod_template("3", "1Gi", {"app": "nginx"})},
    }
    seen = {}

    async def scenario():
        _, tasks = start_loops(cluster)
        await asyncio.sleep(0)
        cluster.create_deployment(deployment)
        cluster.create_training_job(manifests.training_job("a", 2, 30, cpu="2"))
        cluster.create_training_job(manifests.training_job("b", 2, 30, cpu="2"))
        await asyncio.sleep(60)
        seen["trainers before"] = sum(
            cluster.trainer_counts("default", job).running for job in ("a", "b")
        )
        seen["idle before"] = sum(cluster.node_room(n)[0] for n in cluster.node_names())
        cluster.scale_deployment("default", "nginx", 10)
        started = asyncio.get_running_loop().time()
        while cluster.replica_counts("Deployment", "default", "nginx").running < 10:
            await asyncio.sleep(0.5)
            assert asyncio.get_running_loop().time() - started < 60, "nginx never got room"
        seen["lag"] = asyncio.get_running_loop().time() - started
        for task in tasks:
            task.cancel()

    clock.run(scenario())
    assert seen["idle before"] < 8 * 3000  # the trainers had taken the room nginx now needs
    assert seen["trainers before"] >= 20
    assert seen["lag"] <= 10.0  # termination 2 s + start 2 s, plus scheduling


def test_conflicting_writes_are_retried(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    attempts = []

    class Meddler:
        """Writes the trainer Job behind the autoscaler's back before its first update."""

        def __getattr__(self, name):
            return getattr(cluster, name)

        async def update_trainer_job(self, job):
            attempts.append(job["spec"]["parallelism"])
            if len(attempts) == 1:
                other = await cluster.get_trainer_job_by_name("default", "j-trainer")
                other["metadata"].setdefault("annotations", {})["touched"] = "yes"
                await cluster.update_trainer_job(other)
            return await cluster.update_trainer_job(job)

    autoscaler = Autoscaler(Meddler(), interval=NEVER)  # type: ignore[arg-type]
    controller = Controller(cluster, autoscaler)

    async def scenario():
        stored = cluster.create_training_job(manifests.training_job("j", 2, 6, cpu="2"))
        await controller.on_add(stored)
        return await autoscaler.tick()

    decisions = clock.run(scenario())
    assert [d.target for d in decisions] == [6]
    assert attempts == [6, 6]  # the stale write was refused, the re-read one went through
    job = clock.run(cluster.get_trainer_job_by_name("default", "j-trainer"))
    assert job["spec"]["parallelism"] == 6
    annotations = job["metadata"]["annotations"]
    assert annotations["touched"] == "yes"  # the other writer's change is kept
    placed = json.loads(annotations[ANNOTATION_TRAINER_PLACEMENT])  # and the plan's nodes
    assert placed["parallelism"] == 6 and len(placed["nodes"]) == 4


def test_conflict_error_is_what_a_stale_write_raises(clock, cluster_factory, manifests):
    cluster = cluster_factory()

    async def scenario():
        await cluster.create_job(manifests.batch_job("x-trainer", 1, "1"))
        stale = await cluster.get_trainer_job_by_name("default", "x-trainer")
        cluster.scale("Job", "default", "x-trainer", 2)
        try:
            await cluster.update_trainer_job(stale)
        except ConflictError:
            return True
        return False

    assert clock.run(scenario())


def run_case(seed: int, make_job) -> list[tuple]:
    """Five jobs, 1 s apart, on a small cluster; the trainer counts every 5 s."""
    clock = VirtualClock()
    try:
        pod_runner = SimulatedPodRunner(clock, random.Random(seed), start_latency=Uniform(1, 8))
        cluster = InProcessCluster(clock, pod_runner)
        for index in range(6):
            cluster.add_node(f"n{index}", {"cpu": "16", "memory": "64Gi"})
        timeline = []

        async def scenario():
            _, tasks = start_loops(cluster, interval=5.0)
            for index in range(5):
                cluster.create_training_job(make_job(f"job{index}"))
                await asyncio.sleep(1)
            for _ in range(24):
                await asyncio.sleep(5)
                sample = cluster.sample()
                timeline.append(
                    (
                        sample.running_cpu_request_milli,
                        tuple((k, v.running, v.pending) for k, v in sample.trainers.items()),
                    )
                )
            for task in tasks:
                task.cancel()

        clock.run(scenario())
        return timeline
    finally:
        clock.close()


def test_same_seed_same_run_different_seed_different_run(manifests):
    def make_job(name):
        return manifests.training_job(name, 2, 20, cpu="3")

    first, again, other = (run_case(seed, make_job) for seed in (7, 7, 8))
    assert first == again
    assert first != other
    final = dict(first[-1][1][i][:2] for i in range(5))
    assert all(running >= 2 for running in final.values())  # every job got trainers


def test_a_failing_tick_does_not_stop_the_loop(clock, cluster_factory, manifests):
    from edl.policy import get_policy

    class FlakyPolicy:
        """Raises on its first plan, then plans as the default policy."""

        name = "flaky"

        def __init__(self):
            self.calls = 0
            self.inner = get_policy("default")

        def plan(self, jobs, resources, max_load_desired):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("boom")
            return self.inner.plan(jobs, resources, max_load_desired)

    cluster = cluster_factory(nodes=2, cpu="16")
    policy = FlakyPolicy()
    autoscaler = Autoscaler(cluster, policy=policy, interval=5.0)  # type: ignore[arg-type]
    controller = Controller(cluster, autoscaler)

    async def scenario():
        tasks = [asyncio.create_task(controller.run()), asyncio.create_task(autoscaler.run())]
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("j", 2, 8, cpu="2"))
        await asyncio.sleep(30)
        for task in tasks:
            task.cancel()

    clock.run(scenario())
    assert policy.calls > 2
    assert cluster.trainer_counts("default", "j").running == 8


def test_scale_down_takes_effect_in_the_same_instant(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=1, cpu="16", termination=4.0)
    autoscaler, controller = loops(cluster)

    async def scenario():
        await grow_six_trainers(cluster, manifests, autoscaler, controller)
        assert cluster.trainer_counts("default", "j").running == 6
        cluster.create_deployment(
            {
                "metadata": {"name": "svc"},
                "spec": {"replicas": 2, "template": manifests.pod_template("3", "1Gi")},
            }
        )
        await asyncio.sleep(0)  # the pods are created and fail to fit
        await autoscaler.tick()
        await asyncio.sleep(0)  # the Job controller acts on the new parallelism
        return cluster.trainer_counts("default", "j"), clock.now()

    counts, when = clock.run(scenario())
    assert when == 10.0
    assert counts.desired < 6
    assert counts.terminating == 6 - counts.desired


@pytest.mark.parametrize(("status", "done"), [
    ({}, False),
    ({"conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}]}, False),
    ({"conditions": [{"type": "Complete", "status": "False"}]}, False),
    ({"conditions": [{"type": "Complete", "status": "True"}]}, True),
    ({"conditions": [{"type": "FailureTarget", "status": "True"}]}, True),
    ({"conditions": [{"type": "Failed", "status": "True"}]}, True),
    ({"succeeded": 1, "active": 3}, True),  # the work is done: no pod would be created
])
def test_only_a_true_terminal_condition_or_a_success_ends_scaling(status, done):
    from edl.control.job_reads import trainer_job_done

    assert trainer_job_done({"status": status}) is done


def test_the_reason_for_a_resize_outlives_the_ticks_that_keep_it(
    clock, cluster_factory, manifests
):
    """A poller that sees the new size after later ticks still reads why it changed."""
    cluster = cluster_factory(nodes=2, cpu="16")

    async def scenario():
        autoscaler, tasks = start_loops(cluster, interval=1.0)
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("grow", 2, 8, cpu="2"))
        await asyncio.sleep(10)  # grown, then about ten ticks that keep 8
        for task in tasks:
            task.cancel()
        return autoscaler

    autoscaler = clock.run(scenario())
    last = autoscaler.decision_for(("default", "grow"))
    resize = autoscaler.last_resizes[("default", "grow")]
    assert last is not None and last.target == last.parallelism == 8
    assert last.reason.startswith("keep 8")
    assert (resize.parallelism, resize.target) == (2, 8)
    assert resize.reason.startswith("grow 2->8"), resize.reason
    assert autoscaler.ticks > 5


def test_an_edited_fixed_size_reaches_the_trainer_job(clock, cluster_factory, manifests):
    """`kubectl scale --replicas=max` makes min = max: the job is no longer elastic, but
    its new size is still a guarantee the Autoscaler (the single writer of parallelism)
    must apply -- up on a full cluster (the pods wait), and down again on the next edit."""
    cluster = cluster_factory(nodes=1, cpu="8")

    async def resize(low: int, high: int) -> None:
        job = cluster.get_training_job("default", "j")
        job["spec"]["trainer"].update({"min-instance": low, "max-instance": high})
        cluster.replace_training_job(job)
        await asyncio.sleep(5)

    async def scenario():
        autoscaler, tasks = start_loops(cluster, interval=1.0)
        await asyncio.sleep(0)
        cluster.create_training_job(manifests.training_job("j", 2, 6, cpu="1"))
        await asyncio.sleep(10)
        sizes = [await parallelism(cluster, "j")]
        cluster.create_deployment({"metadata": {"name": "svc"}, "spec": {
            "replicas": 1, "template": manifests.pod_template("4", "1Gi")}})
        await asyncio.sleep(10)
        sizes.append(await parallelism(cluster, "j"))
        for low, high in ((6, 6), (3, 3), (3, 6)):
            await resize(low, high)
            sizes.append(await parallelism(cluster, "j"))
        waiting = cluster.trainer_counts("default", "j")
        for task in tasks:
            task.cancel()
        return sizes, autoscaler.last_resizes[("default", "j")].reason, waiting

    sizes, reason, counts = clock.run(scenario())
    # 8 CPU: master 0.5 + pserver 1 + trainers 1 each, under 97 %: 6 fit, then 2 with
    # the service; min = max = 6 brings all 6 back (the service keeps its room: 4 wait)
    assert sizes[:2] == [6, 2]
    assert sizes[2:] == [6, 3, 3], sizes
    assert reason.startswith("shrink 6->3: fixed size"), reason
    assert counts.desired == 3
