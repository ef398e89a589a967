"""Carries the Autoscaler's chosen batch to a collective job's next round of workers.

The Autoscaler writes its choice on the trainer Job (annotation ``edl.dev/batch-size``),
which no worker can read (the pods have no API access). `EtcdBatchSink` copies it to
the job's etcd (`keys.batch_key`), where the workers already find their rendezvous;
each round's rank 0 reads it once at its start and broadcasts it to its round
(`adaptive.agreed_batch`), so every worker of one round runs the same batch and the
batch changes only at a restart. One short HTTP put per change.

A torchrun job is not restarted for a new batch: a restart stops every worker for
19-59 s (measured), which a batch alone rarely pays back. The new batch is taken when
the world next re-forms anyway, for a resize or a failure, the moment the Autoscaler
chooses a batch for the new size too (`edl.policy.batching`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)

__all__ = ["EtcdBatchSink", "read_batch"]


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

