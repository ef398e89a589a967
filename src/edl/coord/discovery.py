"""Discovery for trainers: which pserver serves which index, now and as it changes.

The watch yields whole snapshots (index -> address) rather than raw events, so a
trainer never has to merge deltas; after a broken stream or an etcd restart it
re-lists and resumes, yielding a snapshot only when something changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from edl.coord import keys
from edl.coord.errors import EtcdRequestError, EtcdUnavailableError
from edl.coord.transport import EtcdTransport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    revision: int
    pservers: dict[int, str]


def apply_events(prefix: str, pservers: dict[int, str], events: list) -> dict[int, str]:
    """Pure: the pserver map after a batch of etcd watch events."""
    updated = dict(pservers)
    for event in events:
        index = keys.parse_pserver_key(prefix, bytes(event.kv.key))
        if index is None:
            continue
        if event.type == event.DELETE:
            updated.pop(index, None)
        else:
            updated[index] = bytes(event.kv.value).decode()
    return updated


async def desired_pservers(transport: EtcdTransport, prefix: str, timeout: float) -> int | None:
    response = await transport.range(keys.desired_pservers_key(prefix), timeout)
    if not response.kvs:
        return None
    try:
        return int(response.kvs[0].value)
    except ValueError:
        return None


async def list_pservers(transport: EtcdTransport, prefix: str, timeout: float) -> Snapshot:
    response = await transport.range(keys.pservers_dir(prefix), timeout, prefix=True)
    pservers = {
        index: bytes(kv.value).decode()
        for kv in response.kvs
        if (index := keys.parse_pserver_key(prefix, bytes(kv.key))) is not None
    }
    return Snapshot(int(response.header.revision), dict(sorted(pservers.items())))


async def watch_pservers(
    transport: EtcdTransport, prefix: str, timeout: float, retry_pause: float = 0.2
) -> AsyncIterator[dict[int, str]]:
    """Yield the current pserver map, then a new map after every change; runs until closed."""
    last: dict[int, str] | None = None
    while True:
        try:
            snapshot = await list_pservers(transport, prefix, timeout)
        except EtcdUnavailableError:
            await asyncio.sleep(retry_pause)
            continue
        current = snapshot.pservers
        if current != last:
            last = current
            yield dict(current)
        try:
            async for _revision, events in transport.watch(
                keys.pservers_dir(prefix), snapshot.revision + 1, prefix=True
            ):
                current = apply_events(prefix, current, events)
                if current != last:
                    last = current
                    yield dict(sorted(current.items()))
        except (EtcdUnavailableError, EtcdRequestError) as error:
            log.info("pserver watch interrupted (%s); re-listing", error)
            await asyncio.sleep(retry_pause)
