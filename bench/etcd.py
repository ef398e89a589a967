"""etcd coordination timings on a real etcd server (edl.coord.embedded).

What is measured, ``--runs`` times each (default 20), median and p95:

* **registration latency**: ``EtcdClient.register(port)`` on a fresh client
  (publish desired count, grant lease, list, claim in a txn).  Baseline: one
  plain etcd Put round trip, measured in the same run.
* **lease loss, etcd says gone**: the lease is revoked in etcd; time until the
  owner's ``lease_lost`` fires (renewals every TTL/3).
* **lease loss, etcd unreachable**: etcd is frozen (SIGSTOP); time until the
  owner's local deadline fires ``lease_lost`` — it must be at most the TTL.
* **index takeover**: a pserver dies (stops renewing, as after SIGKILL) while a
  newcomer waits in ``register``; time from death to the newcomer's index.
* **election failover**: the leader dies (stops renewing, as after SIGKILL)
  while a follower campaigns; time from death to ``campaign()`` returning.

Target for loss, takeover and failover: TTL + 1 s (the issue's bound); the ratio
printed is measured / target (below 1 is within target).
Run: .venv/bin/python bench/etcd.py [--runs N] [--ttl S]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import statistics
import time
from collections.abc import Awaitable, Callable

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from edl.coord import Election, EtcdClient
from edl.coord.embedded import EmbeddedEtcd

PREFIX = "/edl/bench/job"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def put_rtt(etcd: EmbeddedEtcd, ttl: int) -> float:
    client = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    try:
        await client.put_key("warm", b"x")
        started = time.perf_counter()
        await client.put_key("bench", b"x")
        return time.perf_counter() - started
    finally:
        await client.shutdown()


async def registration(etcd: EmbeddedEtcd, ttl: int) -> float:
    """A connected client (one read done) registers: 4 round trips incl. a lease grant."""
    client = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    try:
        await client.get_key("warm")
        started = time.perf_counter()
        await client.register(7000)
        return time.perf_counter() - started
    finally:
        await client.shutdown()


async def registration_cold(etcd: EmbeddedEtcd, ttl: int) -> float:
    """A brand-new client registers: includes opening the gRPC connection."""
    client = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    try:
        started = time.perf_counter()
        await client.register(7000)
        return time.perf_counter() - started
    finally:
        await client.shutdown()


async def loss_revoked(etcd: EmbeddedEtcd, ttl: int) -> float:
    owner = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    admin = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    try:
        await owner.register(7000)
        assert owner._lease is not None
        started = time.perf_counter()
        await admin.transport.revoke(owner._lease.id, 5.0)
        await owner.wait_lease_lost()
        return time.perf_counter() - started
    finally:
        await owner.shutdown()
        await admin.shutdown()


async def loss_unreachable(etcd: EmbeddedEtcd, ttl: int) -> float:
    owner = EtcdClient(etcd.endpoints, 1, 2.0, ttl, prefix=PREFIX)
    try:
        await owner.register(7000)
        await asyncio.sleep(ttl / 2)  # somewhere between two renewals
        etcd.kill(signal.SIGSTOP)
        started = time.perf_counter()
        try:
            await owner.wait_lease_lost()
            return time.perf_counter() - started
        finally:
            etcd.kill(signal.SIGCONT)
    finally:
        await owner.shutdown()


async def takeover(etcd: EmbeddedEtcd, ttl: int) -> float:
    holder = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    newcomer = EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX)
    try:
        await holder.register(7000)
        waiting = asyncio.create_task(newcomer.register(7001, timeout=ttl + 30))
        await asyncio.sleep(0.3)
        assert holder._lease is not None
        holder._lease.abandon()  # dies: no more renewals, no revoke
        started = time.perf_counter()
        await waiting
        return time.perf_counter() - started
    finally:
        await holder.transport.close()
        await newcomer.shutdown()


async def failover(etcd: EmbeddedEtcd, ttl: int) -> float:
    clients = [EtcdClient(etcd.endpoints, 1, 5.0, ttl, prefix=PREFIX) for _ in range(2)]
    leader, follower = Election(clients[0], "a:1"), Election(clients[1], "b:1")
    try:
        await leader.campaign(timeout=ttl + 30)
        waiting = asyncio.create_task(follower.campaign(timeout=ttl + 30))
        await asyncio.sleep(0.3)
        assert leader._lease is not None
        leader._lease.abandon()  # dies: no more renewals, no revoke
        started = time.perf_counter()
        await waiting
        return time.perf_counter() - started
    finally:
        await follower.resign()
        for client in clients:
            await client.shutdown()


async def measure(
    progress: Progress, name: str, runs: int, work: Callable[[], Awaitable[float]]
) -> list[float]:
    task = progress.add_task(name, total=runs)
    values = []
    for _ in range(runs):
        values.append(await work())
        progress.advance(task)
    return values


async def main(runs: int, ttl: int) -> None:
    console = Console()
    target = ttl + 1.0
    results: dict[str, list[float]] = {}
    async with EmbeddedEtcd() as etcd:
        with Progress(console=console, transient=True) as progress:
            benches: list[tuple[str, Callable[[EmbeddedEtcd, int], Awaitable[float]]]] = [
                ("put round trip (baseline)", put_rtt),
                ("registration latency", registration),
                ("registration, new connection", registration_cold),
                ("lease loss: etcd says gone", loss_revoked),
                ("lease loss: etcd unreachable", loss_unreachable),
                ("index takeover after death", takeover),
                ("election failover", failover),
            ]
            for name, bench in benches:
                results[name] = await measure(
                    progress, name, runs, lambda b=bench: b(etcd, ttl)
                )
    baseline = statistics.median(results["put round trip (baseline)"])
    table = Table(title=f"etcd coordination, TTL {ttl} s, {runs} runs each (target {target:.0f} s)")
    for column in ("measure", "median", "p95", "ratio"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for name, values in results.items():
        median, high = statistics.median(values), p95(values)
        if name.startswith(("put", "registration")):
            ratio = f"{median / baseline:.1f}x put" if not name.startswith("put") else "1.0x"
            table.add_row(name, f"{median * 1e3:.1f} ms", f"{high * 1e3:.1f} ms", ratio)
        else:
            ratio = f"{high / target:.2f} of target (p95)"
            table.add_row(name, f"{median:.2f} s", f"{high:.2f} s", ratio)
    console.print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--ttl", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # lease-loss warnings are expected here
    asyncio.run(main(args.runs, args.ttl))
