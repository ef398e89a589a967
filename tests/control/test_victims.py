"""The Autoscaler names which trainers leave when the plan and the cluster allow it."""

from __future__ import annotations

import asyncio

from control.grown import grow_six_trainers, loops
from edl.cluster.inproc import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.cluster.port import VictimScaling
from edl.policy import Decision

NEVER = 10_000.0


class JobControllerChooses(InProcessCluster):
    """An in-process cluster without the optional capability (as a plain `Cluster`)."""

    trainer_pods = None  # type: ignore[assignment]
    scale_trainer_job = None  # type: ignore[assignment]


def trainer_nodes(cluster, leaving: bool) -> list[str]:
    return sorted(
        pod.node
        for pod in cluster.pod_records()
        if pod.role == "trainer" and pod.terminating == leaving
    )


def run_shrink(cluster, manifests, clock, choose_nodes):
    """6 trainers; then shrink to 4 naming the nodes `choose_nodes(trainer nodes)` returns."""
    autoscaler, controller = loops(cluster)

    async def scenario():
        await grow_six_trainers(cluster, manifests, autoscaler, controller)
        before = trainer_nodes(cluster, leaving=False)
        named = choose_nodes(before)
        await autoscaler._scale(Decision("default", "j", 6, 4, "test", named))
        await asyncio.sleep(0.1)  # the trainer controller reconciles (pods go at once)
        job = await cluster.get_trainer_job_by_name("default", "j-trainer")
        return before, named, trainer_nodes(cluster, leaving=True), job["spec"]["parallelism"]

    return clock.run(scenario())


def fewest_first(nodes: list[str]) -> tuple[str, ...]:
    """The nodes holding the fewest trainers first (not what a Job controller optimises)."""
    return tuple(sorted(set(nodes), key=lambda node: (nodes.count(node), node)))


def test_trainers_leave_from_the_named_nodes_in_order(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=3, cpu="16", termination=4.0)
    before, named, leaving, parallelism = run_shrink(cluster, manifests, clock, fewest_first)
    assert len(before) == 6 and parallelism == 4
    expected = sorted(sorted(before, key=named.index)[:2])
    assert leaving == expected


def test_a_cluster_without_the_capability_scales_as_before(clock, manifests):
    pod_runner = SimulatedPodRunner(
        clock, start_latency=Fixed(2.0), termination={"trainer": Fixed(4.0)},
        other_termination=Fixed(4.0),
    )
    plain = JobControllerChooses(clock, pod_runner, placement="spread")
    for index in range(3):
        plain.add_node(f"node-{index}", {"cpu": "16", "memory": "32Gi"})
    assert not isinstance(plain, VictimScaling)
    _, _, leaving, parallelism = run_shrink(plain, manifests, clock, fewest_first)
    assert parallelism == 4 and len(leaving) == 2


def test_the_named_pods_leave_and_views_say_where_trainers_run(clock, cluster_factory, manifests):
    """A Decision naming exact victims deletes exactly those; the next views carry every
    trainer's node, the leaving ones flagged."""
    cluster = cluster_factory(nodes=3, cpu="16", termination=4.0)
    autoscaler, controller = loops(cluster)

    async def scenario():
        await grow_six_trainers(cluster, manifests, autoscaler, controller)
        live = sorted(
            (pod.name, pod.node) for pod in cluster.pod_records() if pod.role == "trainer"
        )
        named = (live[4][0], live[1][0])  # not what a Job controller would pick
        await autoscaler._scale(Decision("default", "j", 6, 4, "test", victims=named))
        await asyncio.sleep(0)
        leaving = sorted(
            pod.name for pod in cluster.pod_records()
            if pod.role == "trainer" and pod.terminating
        )
        [view] = await autoscaler._job_views()
        return live, named, leaving, view

    live, named, leaving, view = clock.run(scenario())
    assert len(live) == 6 and leaving == sorted(named)
    assert view.trainers is not None
    assert sorted((t.name, t.node) for t in view.trainers) == live
    assert sorted(t.name for t in view.trainers if t.leaving) == sorted(named)
