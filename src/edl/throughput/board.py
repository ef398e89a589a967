"""Where a job's throughput measurements are published and read.

`ThroughputSource` is what the Autoscaler reads: observations of one job newer than
a time. `ThroughputBoard` is the in-memory one — the simulated masters publish to it
in `edl simulate`, the local run's monitor copies each master's progress into it in
`edl run`. On Kubernetes the controller reads the masters' progress itself (see
docs/architecture.md, "Throughput").
"""

from __future__ import annotations

from collections import deque
from typing import Protocol, runtime_checkable

from edl.throughput.fit import Observation

__all__ = ["BatchSink", "ThroughputBoard", "ThroughputSource"]


@runtime_checkable
class ThroughputSource(Protocol):
    async def job_throughput(
        self, namespace: str, name: str, after: float
    ) -> list[Observation]:
        """Observations of the job with ``at > after``, oldest first."""
        ...


@runtime_checkable
class BatchSink(Protocol):
    async def publish(self, namespace: str, name: str, batch: int) -> bool:
        """Make ``batch`` the one the job's next round of workers reads; False: retry."""
        ...


class ThroughputBoard:
    """Bounded per-job history of observations (the newest ``keep`` per job)."""

    def __init__(self, keep: int = 256) -> None:
        self._keep = keep
        self._jobs: dict[tuple[str, str], deque[Observation]] = {}

    def publish(self, namespace: str, name: str, observation: Observation) -> None:
        history = self._jobs.setdefault((namespace, name), deque(maxlen=self._keep))
        history.append(observation)

    def forget(self, namespace: str, name: str) -> None:
        self._jobs.pop((namespace, name), None)

    def history(self, namespace: str, name: str) -> list[Observation]:
        return list(self._jobs.get((namespace, name), ()))

    async def job_throughput(
        self, namespace: str, name: str, after: float
    ) -> list[Observation]:
        return [o for o in self._jobs.get((namespace, name), ()) if o.at > after]
