"""Follow one etcd key or prefix: the current value, then a new value after each change.

Why one helper: trainers follow both the pserver map and the master's address, and
both need the same care — list first, watch from the listed revision + 1 so no
change is missed, re-list after a broken stream or an etcd restart, and yield only
when the value really changed (a re-list after a restart often changes nothing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from edl.coord.backoff import Backoff
from edl.coord.errors import EtcdRequestError, EtcdUnavailableError
from edl.coord.transport import EtcdTransport

log = logging.getLogger(__name__)

T = TypeVar("T")
_NOTHING: Any = object()


async def follow(
    transport: EtcdTransport,
    key: bytes,
    *,
    prefix: bool,
    timeout: float,
    read: Callable[[Any], T],
    fold: Callable[[T, list[Any]], T],
    retry_pause: float = 0.2,
) -> AsyncIterator[T]:
    """Yield ``read(range response)`` now, then ``fold(value, events)`` on each change.

    Runs until the consumer stops iterating; etcd being away only pauses it.
    """
    last: T = _NOTHING
    backoff = Backoff(first=retry_pause)
    while True:
        try:
            response = await transport.range(key, timeout, prefix=prefix)
            backoff.succeeded()
            current = read(response)
            if current != last:
                last = current
                yield current
            start = int(response.header.revision) + 1
            async for _revision, events in transport.watch(key, start, prefix=prefix):
                current = fold(current, events)
                if current != last:
                    last = current
                    yield current
        except (EtcdUnavailableError, EtcdRequestError) as error:
            pause, loud = backoff.failed()
            if loud:
                what = key.decode(errors="replace")
                log.info("watch of %s interrupted (%s); re-listing (failure %d)",
                         what, error, backoff.failures)
            await asyncio.sleep(pause)
