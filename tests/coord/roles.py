"""Real processes for the chaos tests: a pserver that registers, a master candidate.

Run as ``python roles.py pserver ENDPOINTS PREFIX PORT TTL`` or
``python roles.py candidate ENDPOINTS PREFIX NAME TTL``.  Each prints one line per
fact, ``<WORD> <monotonic time> [detail]``, so the test can order events across
processes (CLOCK_MONOTONIC is system-wide and keeps running while SIGSTOPped).
"""

from __future__ import annotations

import asyncio
import sys
import time

from edl.coord import EtcdClient, NotLeaderError
from edl.coord.election import Election


def say(word: str, detail: object = "") -> None:
    print(f"{word} {time.monotonic():.6f} {detail}".rstrip(), flush=True)


async def pserver(endpoints: str, prefix: str, port: int, ttl: int) -> None:
    """Register, then 'serve' every 50 ms only while the lease is certainly valid."""
    client = EtcdClient(endpoints, 1, 2.0, ttl, prefix=prefix)
    client.on_lease_lost(lambda reason: say("LOST", reason))
    index = await client.register(port)
    say("REGISTERED", index)
    while True:
        say("SERVE" if client.lease_valid() else "REFUSE")
        await asyncio.sleep(0.05)


async def candidate(endpoints: str, prefix: str, name: str, ttl: int) -> None:
    """Campaign; once leader, write ``state/owner = name`` fenced, every 100 ms."""
    client = EtcdClient(endpoints, 1, 2.0, ttl, prefix=prefix)
    election = Election(client, f"{name}:1")
    say("CAMPAIGN")
    revision = await election.campaign()
    say("LEADER", revision)
    store = election.store
    while True:
        try:
            await store.put("owner", name.encode())
            say("WROTE")
        except NotLeaderError as error:
            say("DEPOSED", error)
            return
        await asyncio.sleep(0.1)


if __name__ == "__main__":
    role, endpoints, prefix, arg, ttl = sys.argv[1:6]
    if role == "pserver":
        asyncio.run(pserver(endpoints, prefix, int(arg), int(ttl)))
    else:
        asyncio.run(candidate(endpoints, prefix, arg, int(ttl)))
