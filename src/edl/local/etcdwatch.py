"""Keep the embedded etcd of `edl run` alive: notice its death at once and restart it.

Why here: `edl run` owns etcd (it replaces the master pod's sidecar), so nothing
else would notice it die; the members would retry for ever against a dead port.
The watcher polls the process (which also reaps it: no zombie), and restarts it
on the same ports and data dir. The members recover by themselves: etcd restores
leases with a fresh TTL, so the master keeps or re-wins its election and the
pservers keep their registrations; clients reconnect on their next retry. A
server that will not start again, or dies `max_restarts` times within
`window_s`, ends the run with one line naming etcd.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from edl.coord.embedded import EmbeddedEtcd, EtcdStartError

log = logging.getLogger(__name__)


def describe_exit(code: int | None) -> str:
    """`killed by SIGKILL` / `exited with status 2` for a process's return code."""
    if code is None:
        return "is gone"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


async def keep_etcd_alive(
    etcd: EmbeddedEtcd,
    on_event: Callable[[str], None],
    on_fatal: Callable[[str], None],
    check_s: float = 0.2,
    max_restarts: int = 3,
    window_s: float = 60.0,
) -> None:
    """Watch `etcd` until cancelled; restart it on death, or call on_fatal and return."""
    restarts: list[float] = []
    while True:
        await asyncio.sleep(check_s)
        if etcd.running:
            continue
        died = f"etcd (pid {etcd.pid}) {describe_exit(etcd.returncode)}"
        last = etcd.log_tail(1).strip()
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < window_s]
        if len(restarts) >= max_restarts:
            on_fatal(f"{died}, the {len(restarts) + 1}th time in {window_s:.0f} s; giving up"
                     + (f" (last log line: {last})" if last else ""))
            return
        on_event(f"{died}; restarting it on the same data dir")
        started = time.monotonic()
        try:
            await etcd.aup()
        except (EtcdStartError, OSError) as error:
            on_fatal(f"{died} and could not be restarted: {error}")
            return
        restarts.append(now)
        on_event(f"etcd restarted (pid {etcd.pid}) in {time.monotonic() - started:.1f} s")
