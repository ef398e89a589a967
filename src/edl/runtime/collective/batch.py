"""Carries the Autoscaler's chosen batch to a collective job's next round of workers.

The Autoscaler writes its choice on the trainer Job (annotation ``edl.dev/batch-size``),
which no worker can read (the pods have no API access). `EtcdBatchSink` copies it to
the job's etcd (`keys.batch_key`), where the workers already find their rendezvous;
each round's rank 0 reads it once at its start and broadcasts it to its round
(`adaptive.agreed_batch`), so every worker of one round runs the same batch and the
batch changes only at a restart. One short HTTP put per change.

A new batch must not wait for a resize to happen: `BatchWatch` (in each agent's
rendezvous handler) notes the batch a round started with and, when another is
published, reports a node waiting, which makes torch's agent restart its workers
into a new round, as it does when a trainer joins (no restart is counted as a
failure). The workers resume from their checkpoint with the new batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)

__all__ = ["BatchWatch", "EtcdBatchSink", "read_batch"]


class EtcdBatchSink:
    """`edl.control.autoscaler.BatchSink` over the jobs' etcd (``endpoint_of``)."""

    def __init__(self, endpoint_of: Callable[[str, str], str | None], timeout_s: float = 1.0):
        self._endpoint_of = endpoint_of
        self._timeout = timeout_s

    async def publish(self, namespace: str, name: str, batch: int) -> bool:
        """Write the batch; False (to retry next tick) when the job's etcd does not answer."""
        endpoint = self._endpoint_of(namespace, name)
        if not endpoint:
            return False
        try:
            await asyncio.to_thread(gateway.put, endpoint, keys.batch_key(namespace, name),
                                    str(int(batch)), self._timeout)
        except OSError as error:
            log.debug("%s/%s: batch not published: %s", namespace, name, error)
            return False
        return True


def read_batch(endpoints: str, namespace: str, job: str) -> int | None:
    """The published batch (None: none, unreadable, or etcd does not answer)."""
    try:
        text = gateway.get(endpoints, keys.batch_key(namespace, job))
    except OSError:
        return None
    try:
        value = int(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value >= 1 else None


class BatchWatch:
    """Whether the job's published batch differs from the one this round started with.

    Reads etcd at most every ``interval_s`` (torch's agent asks every second)."""

    def __init__(self, endpoints: str, namespace: str, job: str, interval_s: float = 3.0,
                 read: Callable[[str, str, str], int | None] = read_batch) -> None:
        self._where = (endpoints, namespace, job)
        self._interval = interval_s
        self._read = read
        self._round_batch: int | None = None
        self._next = 0.0

    def round_started(self) -> None:
        """A round formed: its workers read the batch published now."""
        self._round_batch = self._read(*self._where)
        self._next = time.monotonic() + self._interval

    def changed(self) -> bool:
        """True once a batch other than the round's is published (a restart is due)."""
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + self._interval
        published = self._read(*self._where)
        return published is not None and published != self._round_batch
