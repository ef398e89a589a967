"""The Autoscaler's chosen batches, copied to where a job's pods read them.

The trainer Job's annotation ``edl.dev/batch-size`` is the record; `BatchPublisher`
puts each chosen batch of a job whose pods read it (a collective job's workers, a
parameter-server job's pservers) to ``sink`` (`edl.throughput.board.BatchSink`;
the job's etcd, `edl.runtime.collective.batch`) once per change, retrying a put the
sink did not take at the next tick. Without a sink nothing is copied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from edl.api.trainingjob import TrainingJob
from edl.policy import Decision
from edl.throughput.board import BatchSink

Key = tuple[str, str]


def reads_batch(job: TrainingJob | None) -> bool:
    """Whether a job's pods read its chosen batch from its etcd: a collective job's
    workers; a parameter-server job's pservers when it adapts its batch (spec.batch)."""
    return job is not None and (job.collective() or job.spec.batch is not None)


class BatchPublisher:
    def __init__(self, sink: BatchSink | None = None) -> None:
        self.sink = sink
        self._published: dict[Key, int] = {}

    async def publish(
        self, chosen: Mapping[Key, float | None], decisions: Sequence[Decision],
        collective: Callable[[Key], bool],
    ) -> None:
        """``chosen``: the trainer Jobs' annotations; ``decisions``: this tick's (newer)."""
        if self.sink is None:
            return
        batches = dict(chosen) | {(d.namespace, d.name): float(d.batch) for d in decisions
                                  if d.batch}
        for key, batch in batches.items():
            if not batch or not collective(key) or self._published.get(key) == int(batch):
                continue
            if await self.sink.publish(*key, int(batch)):
                self._published[key] = int(batch)

    def forget(self, key: Key) -> None:
        self._published.pop(key, None)
