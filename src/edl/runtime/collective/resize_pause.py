"""A restarted world's pause, measured where it ends: the first step of the new world.

torch's elastic agent restarts every worker of a collective job when its world changes
(or a new batch is published). The `edl` rendezvous handler, in the agent's process,
notes when it first saw the change (the old world stopping) and hands that wall time
and its count of restarts to the new workers through their environment; the script's
`AdaptiveBatch` (rank 0) takes the pause at its first step and reports it with its
metrics, so it reaches the Autoscaler's throughput board as the job's measured resize
cost (`edl.throughput.pause`). The pause counts relaunching the workers, importing
torch, loading the checkpoint and the rendezvous; steps redone since the checkpoint
are not counted (the script alone knows them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

__all__ = ["RESIZES_ENV", "STARTED_ENV", "measured_pause"]

STARTED_ENV = "EDL_RESIZE_STARTED_AT"  # wall time the old world began to stop
RESIZES_ENV = "EDL_RESIZES"  # restarts of this agent so far


def measured_pause(env: Mapping[str, str], now: float | None = None) -> dict[str, float]:
    """``resize_pause_s`` and ``resizes`` for this world's first step; {} for a first world
    or a contract that does not read as numbers."""
    try:
        started, count = float(env[STARTED_ENV]), int(env[RESIZES_ENV])
    except (KeyError, ValueError):
        return {}
    pause = (time.time() if now is None else now) - started
    if not math.isfinite(pause) or pause < 0 or count < 1:
        return {}
    return {"resize_pause_s": round(pause, 3), "resizes": float(count)}
