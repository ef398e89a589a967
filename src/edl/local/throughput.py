"""The run's copy of the master's throughput, for the Autoscaler and the display.

Each new progress document the monitor reads is one point (contributing trainers,
samples/s) of the job's scaling curve; it goes to the `ThroughputBoard` the
Autoscaler fits from, and the latest point with the fit's prediction at ±1 trainer
goes to the snapshot (`snapshot.apply_fit`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from edl.control.autoscaler import Autoscaler
from edl.local import snapshot as snap
from edl.local.status import RunSnapshot
from edl.throughput.board import ThroughputBoard
from edl.throughput.progress import observation_from_progress


class ThroughputFeed:
    def __init__(self, namespace: str, name: str) -> None:
        self.key = (namespace, name)
        self.board = ThroughputBoard()
        self._seen: object = None

    def fold(
        self, s: RunSnapshot, progress: dict[str, Any] | None, autoscaler: Autoscaler | None
    ) -> RunSnapshot:
        """Publish a new progress point; the snapshot with the measured point and the fit."""
        if progress is not None and progress is not self._seen:
            self._seen = progress
            point = observation_from_progress(progress, asyncio.get_running_loop().time())
            if point is not None:
                self.board.publish(*self.key, point)
        fit = autoscaler.scaling.fit(self.key) if autoscaler is not None else None
        curve = fit.curve() if fit is not None else None
        return snap.apply_fit(s, curve, self.board.history(*self.key))
