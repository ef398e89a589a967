"""The per-trainer batch a batch-adapting parameter-server job's master hands out (pure).

A job with ``spec.batch`` has a total batch B: the Autoscaler's choice, which its
pservers read from the job's etcd and sum pushes to (`edl.runtime.pserver.aggregate`),
else the initial batch. Summing k pushes gives the update its batch, but each push still
pays the per-step overhead (a round trip to every pserver) on one trainer's small
batch: only a larger *per-trainer* batch amortises it, which is what goodput's
throughput model (`edl.throughput.batch`) assumes of a larger batch. So the master,
which hands out every task, tells each task the per-trainer batch b = ⌈B / n⌉ for the
n live trainers (n pushes of b make one update of B; no trainer restarts: a trainer
takes it at its next task), cut at the task's own samples (a batch does not span
tasks). The pservers' records are where the master reads B (`batch`), so the trainers
push what the pservers sum to. Trainers report the batch each task was trained at;
the counts are in the progress (``trainer_batches``: finished tasks per batch).

Trainers also report the seconds each task spent computing (batch, forward, backward:
not pushing nor waiting for the pservers). The progress's ``compute_rate``, one
trainer's samples/s computing alone over the last tasks, is what splits a step into
the part a larger batch scales and the overhead it amortises
(`edl.throughput.batch.step_overhead`): without it a curve measured at one trainer
count shows no overhead, and the policy never finds a larger batch worth it.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

__all__ = ["TrainerBatch"]

_RECENT_TASKS = 20  # the compute rate's window


class TrainerBatch:
    """The job's total batch and the per-trainer batch of the next task."""

    def __init__(self, initial: int) -> None:
        self.total = max(0, int(initial))  # 0: the job does not adapt its batch
        self.finished: dict[int, int] = {}  # per-trainer batch -> tasks finished at it
        self.last = 0  # the per-trainer batch handed out last
        self._compute: deque[tuple[int, float]] = deque(maxlen=_RECENT_TASKS)

    @property
    def adapts(self) -> bool:
        return self.total > 0

    def follow(self, figures: dict[str, Any]) -> None:
        """Take the total batch the pservers sum to (their combined records' ``batch``)."""
        batch = figures.get("batch")
        if (self.adapts and isinstance(batch, int | float) and not isinstance(batch, bool)
                and math.isfinite(batch) and batch >= 1):
            self.total = round(batch)

    def per_trainer(self, trainers: int, task_samples: int) -> int:
        """b for a task of ``task_samples`` with ``trainers`` live (0: not adapting)."""
        if not self.adapts:
            return 0
        share = math.ceil(self.total / max(1, trainers))
        self.last = max(1, min(share, max(1, task_samples)))
        return self.last

    def finished_at(self, batch: int, samples: int = 0, compute_s: float = 0.0) -> None:
        """A trainer finished a task of ``samples`` at per-trainer ``batch`` (0: it did
        not say), computing for ``compute_s`` seconds of it."""
        if not self.adapts:
            return
        if batch > 0:
            self.finished[batch] = self.finished.get(batch, 0) + 1
        if samples > 0 and math.isfinite(compute_s) and compute_s > 0:
            self._compute.append((samples, compute_s))

    @property
    def compute_rate(self) -> float | None:
        """One trainer's samples/s computing, over the last tasks (None: none reported)."""
        seconds = sum(s for _, s in self._compute)
        return sum(n for n, _ in self._compute) / seconds if seconds > 0 else None

    def progress(self) -> dict[str, Any]:
        """What the progress carries (nothing for a job that does not adapt): the batch
        handed out last and the tasks finished at each (this master's term)."""
        if not self.adapts:
            return {}
        out: dict[str, Any] = {
            "trainer_batch": self.last,
            "trainer_batches": {str(b): n for b, n in sorted(self.finished.items())},
        }
        rate = self.compute_rate
        if rate is not None:
            out["compute_rate"] = round(rate, 2)
        return out
