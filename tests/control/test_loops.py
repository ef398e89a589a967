"""`ControlLoops`: the one place the Controller and Autoscaler are started and stopped."""

from __future__ import annotations

import asyncio

import pytest

from edl.control.autoscaler import Autoscaler
from edl.control.loops import ControlLoops, LoopEndedError


def test_seed_style_new_and_run_watch_and_scale(clock, cluster_factory, manifests):
    # The seed's New(cluster, maxLoadDesired) + Run(): one object watches and scales.
    cluster = cluster_factory(nodes=2, cpu="16")
    loops = ControlLoops.new(cluster, 0.9, status_interval=1.0)
    assert loops.autoscaler is not None
    assert loops.autoscaler.max_load_desired == 0.9
    cluster.create_training_job(manifests.training_job("elastic", 1, 20, cpu="2"))

    async def scenario():
        task = asyncio.create_task(loops.run())
        await asyncio.sleep(60)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    clock.run(scenario())
    trainer = cluster.store.peek("Job", "default", "elastic-trainer")
    # 32 CPUs, 90 % of it, minus master and pserver (1.5 CPU), 2 CPU per trainer -> 13
    assert 1 < trainer["spec"]["parallelism"] <= 13
    assert loops.autoscaler.ticks > 0
    assert loops.tasks == []  # run() stopped every loop on its way out


def test_without_a_load_target_jobs_keep_their_size(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    loops = ControlLoops.new(cluster, None, status_interval=1.0)
    assert loops.autoscaler is None
    cluster.create_training_job(manifests.training_job("fixed", 2, 20, cpu="2"))

    async def scenario():
        loops.start()
        await asyncio.sleep(30)
        await loops.stop()

    clock.run(scenario())
    trainer = cluster.store.peek("Job", "default", "fixed-trainer")
    assert trainer["spec"]["parallelism"] == 2


def test_a_bad_load_target_is_refused(cluster_factory):
    with pytest.raises(ValueError, match="max_load_desired"):
        ControlLoops.new(cluster_factory(), 1.5)


def test_the_first_loop_to_fail_is_reraised_and_the_others_stopped(clock, cluster_factory):
    loops = ControlLoops.new(cluster_factory(), 0.9)
    outcome: dict[str, object] = {}

    async def broken() -> None:
        await asyncio.sleep(5)
        raise OSError("watch connection lost")

    async def scenario():
        loops.start()
        loops.add("operator", broken())
        tasks = list(loops.tasks)
        with pytest.raises(OSError, match="watch connection lost"):
            await loops.wait()
        outcome["failure"] = loops.failure()
        await loops.stop()
        outcome["cancelled"] = [t.get_name() for t in tasks if t.cancelled()]

    clock.run(scenario())
    assert outcome["failure"] == "the operator stopped: OSError('watch connection lost')"
    assert outcome["cancelled"] == ["controller", "autoscaler"]


def test_a_loop_that_returns_counts_as_failed(clock, cluster_factory):
    loops = ControlLoops.new(cluster_factory(), None)

    async def quits() -> None:
        await asyncio.sleep(1)

    async def scenario():
        loops.start()
        loops.add("quitter", quits())
        with pytest.raises(LoopEndedError, match="the quitter stopped: it returned"):
            await loops.wait()
        await loops.stop()

    clock.run(scenario())


def test_a_kick_at_the_moment_of_the_cancel_still_stops_the_autoscaler(clock, cluster_factory):
    """The flake of tests/kube/test_controller_kmock.py::test_broken_watches_resume (its
    teardown timed out after 120 s): Python 3.11's `asyncio.wait_for` returns the result,
    swallowing the cancellation, when its awaitable completed in the same loop iteration
    as the cancel arrived. The Autoscaler waited for a kick that way, so a kick (a pod
    event) just as `ControlLoops.stop` cancelled it kept it ticking, and the stop waited
    for it for ever."""
    autoscaler = Autoscaler(cluster_factory(), interval=5.0)

    async def scenario() -> bool:
        task = asyncio.create_task(autoscaler.run())
        await asyncio.sleep(1)  # waiting for a kick or the next interval
        autoscaler.kick()
        task.cancel()
        await asyncio.wait({task}, timeout=60)
        stopped = task.cancelled()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return stopped

    assert clock.run(scenario())
