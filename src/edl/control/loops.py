"""`ControlLoops`: the Controller and the Autoscaler of one cluster, run as tasks together.

The simulator, `edl run` and `edl controller` all start, watch and stop the loops
through this one class, so they agree on what "the loops failed" means: the
loops never end by themselves, so the first one that ends has failed, and its
error is re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

from edl.cluster.port import Cluster
from edl.control.autoscaler import DEFAULT_INTERVAL_S, Autoscaler
from edl.control.controller import Controller
from edl.jobparser import JobParser
from edl.policy import Policy
from edl.throughput.board import ThroughputSource


class LoopEndedError(RuntimeError):
    """A loop that runs until cancelled returned on its own."""


class ControlLoops:
    """Runs a `Controller` and (optionally) its `Autoscaler`, plus any extra loops.

    ``autoscaler`` None means autoscaling off: jobs keep the size they ask for.
    """

    def __init__(self, controller: Controller, autoscaler: Autoscaler | None = None) -> None:
        self.controller = controller
        self.autoscaler = autoscaler
        self.tasks: list[asyncio.Task[None]] = []

    @classmethod
    def new(
        cls,
        cluster: Cluster,
        max_load_desired: float | None,
        *,
        policy: Policy | str = "default",
        interval: float = DEFAULT_INTERVAL_S,
        status_interval: float = 5.0,
        throughput: ThroughputSource | None = None,
        parser: JobParser | None = None,
    ) -> ControlLoops:
        """PaddlePaddle EDL's ``New(cluster, maxLoadDesired)``: a Controller and its Autoscaler.

        ``max_load_desired`` None builds the Controller alone (autoscaling off).
        """
        autoscaler = None
        if max_load_desired is not None:
            if not 0 < max_load_desired <= 1:
                raise ValueError(f"max_load_desired must be in (0, 1] (got {max_load_desired})")
            autoscaler = Autoscaler(
                cluster, policy, max_load_desired, interval=interval, throughput=throughput
            )
        controller = Controller(cluster, autoscaler, parser, status_interval=status_interval)
        return cls(controller, autoscaler)

    def start(self) -> None:
        """Start the loops as tasks on the running event loop (the Controller first, so it
        subscribes to TrainingJob events before anything else runs)."""
        if self.tasks:
            raise RuntimeError("the loops are already running")
        self.add("controller", self.controller.run())
        if self.autoscaler is not None:
            self.add("autoscaler", self.autoscaler.run())

    def add(self, name: str, loop: Awaitable[None]) -> None:
        """Run one more loop under the same rules (e.g. kopf's operator on Kubernetes)."""
        self.tasks.append(asyncio.ensure_future(loop))
        self.tasks[-1].set_name(name)

    def failure(self) -> str | None:
        """One line naming the first loop that ended and why; None while all run."""
        for task in self.tasks:
            if task.done():
                error = None if task.cancelled() else task.exception()
                why = repr(error) if error is not None else "it returned"
                return f"the {task.get_name()} stopped: {why}"
        return None

    async def wait(self) -> None:
        """Until the first loop ends; re-raise its error (`LoopEndedError` if it had none)."""
        done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
        raise LoopEndedError(self.failure() or "a loop ended")

    async def run(self) -> None:
        """PaddlePaddle EDL's ``Run``: start, wait for a failure (re-raised), always stop."""
        self.start()
        try:
            await self.wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Cancel every loop and wait for each to unwind (their errors are not re-raised)."""
        tasks, self.tasks = self.tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
