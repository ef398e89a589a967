"""Jobs an event asks the Controller to refresh before its next status interval.

Under Kueue (`edl.control.queue_gate`), the admission or eviction of a job's servers'
Workload is acted on at a status refresh; a cluster that watches those Workloads
(``watch_servers``) kicks the job so that the Controller's loop refreshes it at once,
in the same loop as the periodic refresh, and never beside an event's reconcile of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

JobKey = tuple[str, str]


class Kicks:
    """A set of kicked jobs and an event that wakes the loop waiting for them."""

    def __init__(self) -> None:
        self._keys: set[JobKey] = set()
        self._wake = asyncio.Event()
        self._locks: dict[JobKey, asyncio.Lock] = {}

    def kick(self, namespace: str, name: str) -> None:
        self._keys.add((namespace, name))
        self._wake.set()

    def follow(self, cluster: object, *stops: Callable[[], None]) -> Callable[[], None]:
        """Take kicks from `cluster`'s ``watch_servers`` (when it has one); returns the
        function that stops them and calls `stops` (other subscriptions' ends)."""
        watch = getattr(cluster, "watch_servers", None)
        ends = [*stops, watch(self.kick)] if watch is not None else list(stops)

        def every() -> None:
            for end in ends:
                end()

        return every

    def lock(self, key: JobKey) -> asyncio.Lock:
        """Held while the job is reconciled or refreshed: a kick that arrives during an
        event's reconcile, which read the Workload before Kueue admitted it, is acted on
        after it (it would otherwise find the job not yet held and do nothing)."""
        return self._locks.setdefault(key, asyncio.Lock())

    def forget(self, key: JobKey) -> None:
        self._locks.pop(key, None)

    async def until(self, deadline: float) -> set[JobKey]:
        """The jobs kicked since the last call, once there is one or at `deadline` (the
        event loop's clock; then often none)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self._wake.wait()
        self._wake.clear()
        keys, self._keys = self._keys, set()
        return keys
