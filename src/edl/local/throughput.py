"""The run's copy of the master's throughput, for the Autoscaler and the display.

Each new progress document the monitor reads (a collective job: each new metrics
record of `AdaptiveBatch`, which also carries batch and φ) is one point (contributing trainers,
samples/s) of the job's scaling curve; it goes to the `ThroughputBoard` the
Autoscaler fits from, and the latest point with the fit's prediction at ±1 trainer
goes to the snapshot (`snapshot.apply_fit`), with the job's smoothed resize pause as
the Autoscaler reads it (`edl.throughput.pause`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from edl.control.autoscaler import Autoscaler
from edl.local import snapshot as snap
from edl.local.status import RunSnapshot
from edl.runtime.collective.batch import EtcdBatchSink
from edl.throughput.board import ThroughputBoard
from edl.throughput.progress import observation_from_metrics, observation_from_progress


class ThroughputFeed:
    def __init__(self, namespace: str, name: str) -> None:
        self.key = (namespace, name)
        self.board = ThroughputBoard()
        self._seen: object = None

    def carry_batches(self, autoscaler: Autoscaler | None, endpoints: str) -> None:
        """The Autoscaler's chosen batches go to the run's etcd, where workers read them."""
        if autoscaler is not None:
            autoscaler.batches.sink = EtcdBatchSink(lambda _namespace, _job: endpoints)

    def fold(
        self, s: RunSnapshot, progress: dict[str, Any] | None, autoscaler: Autoscaler | None,
        metrics: dict[str, float] | None = None,
    ) -> RunSnapshot:
        """Publish a new progress point (a collective job: its new metrics record, with
        trainers, samples/s, batch and φ from `AdaptiveBatch`); the snapshot with the
        measured point and the fit."""
        at = asyncio.get_running_loop().time()
        point = None
        if metrics is not None:
            if metrics and metrics != self._seen:
                self._seen = dict(metrics)
                point = observation_from_metrics(metrics, at)
        elif progress is not None and progress is not self._seen:
            self._seen = progress
            point = observation_from_progress(progress, at)
        if point is not None:
            self.board.publish(*self.key, point)
        fit = autoscaler.scaling.fit(self.key) if autoscaler is not None else None
        curve = fit.curve() if fit is not None else None
        pause = autoscaler.scaling.pause(self.key) if autoscaler is not None else None
        if pause is not None and pause.value is not None:
            s = replace(s, resize_pause_s=round(pause.value, 3), resizes_measured=pause.folded)
        return snap.apply_fit(s, curve, self.board.history(*self.key))
