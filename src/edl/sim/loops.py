"""Start the Controller (and, unless autoscaling is off, the Autoscaler) on a cluster.

The same classes that run against Kubernetes; the simulator only wires them up
and stops them at the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from edl.autoscaler import Autoscaler
from edl.cluster.port import Cluster
from edl.controller import Controller
from edl.sim.scenario import Scenario

Stop = Callable[[], Awaitable[None]]


async def start_loops(cluster: Cluster, scenario: Scenario, policy: str | None) -> Stop:
    """Run the loops as tasks on the current event loop; returns a coroutine that stops them.

    ``policy`` None means autoscaling off: the Controller alone, jobs keep their size.
    """
    autoscaler = None
    if policy is not None:
        autoscaler = Autoscaler(
            cluster,
            policy,
            max_load_desired=scenario.autoscaler.max_load_desired,
            interval=scenario.autoscaler.interval_s,
        )
    controller = Controller(cluster, autoscaler)
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(controller.run(), name="controller")]
    if autoscaler is not None:
        tasks.append(loop.create_task(autoscaler.run(), name="autoscaler"))

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return stop
