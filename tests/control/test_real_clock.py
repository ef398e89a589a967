"""The same Controller and Autoscaler on real time (`AsyncioClock`), as `edl run` uses them."""

from __future__ import annotations

import asyncio
import time

from edl.cluster.inproc import AsyncioClock, Fixed, InProcessCluster, SimulatedPodRunner
from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller


async def test_loops_scale_a_job_on_a_real_clock(manifests):
    clock = AsyncioClock()
    pod_runner = SimulatedPodRunner(
        clock, start_latency=Fixed(0.05), termination={"trainer": Fixed(0.05)}
    )
    cluster = InProcessCluster(clock, pod_runner)
    cluster.add_node("local", {"cpu": "8", "memory": "16Gi"})
    autoscaler = Autoscaler(cluster, interval=0.2)
    controller = Controller(cluster, autoscaler, status_interval=0.1)
    tasks = [asyncio.create_task(controller.run()), asyncio.create_task(autoscaler.run())]
    started = time.monotonic()
    try:
        cluster.create_training_job(manifests.training_job("local", 1, 4, cpu="1"))
        deadline = time.monotonic() + 30  # generous: the machine may be loaded
        while time.monotonic() < deadline:
            status = cluster.get_training_job("default", "local").get("status", {})
            if status.get("trainers", {}).get("running") == 4:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"trainers never reached 4: {status}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert status["state"] == "Running"
    assert 0 < clock.now() < time.monotonic() - started + 1  # real seconds, not virtual
