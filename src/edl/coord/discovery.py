"""Discovery for trainers: which pserver serves which index, now and as it changes.

The watch yields whole snapshots (index -> address) rather than raw events, so a
trainer never has to merge deltas; after a broken stream or an etcd restart it
re-lists and resumes, yielding a snapshot only when something changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from edl.coord import keys
from edl.coord.follow import follow
from edl.coord.transport import EtcdTransport


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


def _pservers_in(prefix: str, kvs: Any) -> dict[int, str]:
    """Pure: index -> address of the pserver keys among ``kvs`` (other keys ignored)."""
    pservers = {
        index: bytes(kv.value).decode()
        for kv in kvs
        if (index := keys.parse_pserver_key(prefix, bytes(kv.key))) is not None
    }
    return dict(sorted(pservers.items()))


async def list_pservers(transport: EtcdTransport, prefix: str, timeout: float) -> Snapshot:
    response = await transport.range(keys.pservers_dir(prefix), timeout, prefix=True)
    return Snapshot(int(response.header.revision), _pservers_in(prefix, response.kvs))


async def watch_pservers(
    transport: EtcdTransport, prefix: str, timeout: float, retry_pause: float = 0.2
) -> AsyncIterator[dict[int, str]]:
    """Yield the current pserver map, then a new map after every change; runs until closed.

    Each map is the caller's own copy: changing it cannot corrupt the next one.
    """
    async for pservers in follow(
        transport,
        keys.pservers_dir(prefix),
        prefix=True,
        timeout=timeout,
        read=lambda response: _pservers_in(prefix, response.kvs),
        fold=lambda current, events: dict(sorted(apply_events(prefix, current, events).items())),
        retry_pause=retry_pause,
    ):
        yield dict(pservers)
