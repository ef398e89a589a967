"""A job grown to its six trainers by the real Controller and Autoscaler (shared setup)."""

from __future__ import annotations

import asyncio
from typing import Any

from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller

NEVER = 10_000.0  # a periodic interval long enough that only events can cause ticks


def loops(cluster: Any) -> tuple[Autoscaler, Controller]:
    """An Autoscaler that ticks only when told, and its Controller."""
    autoscaler = Autoscaler(cluster, interval=NEVER)
    return autoscaler, Controller(cluster, autoscaler)


async def grow_six_trainers(cluster: Any, manifests: Any, autoscaler: Autoscaler,
                            controller: Controller) -> None:
    """Submit job "j" (2..6 trainers of 2 CPU), plan it once, and let its pods start."""
    stored = cluster.create_training_job(manifests.training_job("j", 2, 6, cpu="2"))
    await controller.on_add(stored)
    await autoscaler.tick()
    await asyncio.sleep(10)
