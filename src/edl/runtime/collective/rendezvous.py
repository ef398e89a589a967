"""`edl rendezvous`: the master pod of a collective job hosts the c10d store.

A `torch.distributed.TCPStore` server on ``0.0.0.0:EDL_PORT``: torch's dynamic
rendezvous keeps its state in it (compare-and-set on one key per job), so every
agent of the job meets here. Its address ``EDL_POD_IP:port`` is written to the
job's etcd (`keys.rendezvous_key`), where agents look it up when the master
Service's name is not set (local runs). The state lives in this process's
memory: if the master pod is replaced, the agents' next store call fails, their
pods fail and are replaced, and they meet again at the new store — training
resumes from the script's last checkpoint.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import timedelta

from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)


def serve(
    host: str,
    port: int,
    advertise: str,
    etcd_endpoints: str,
    namespace: str,
    job: str,
    stop: threading.Event | None = None,
) -> None:
    """Host the store until SIGTERM/SIGINT (or ``stop``); publish its address first."""
    from torch.distributed import TCPStore

    store = TCPStore(
        host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60),
        multi_tenant=True,
    )
    address = f"{advertise}:{store.port}"
    log.info("c10d rendezvous store listening on %s:%d (advertised %s)", host, store.port, address)
    done = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: done.set())
    key = keys.rendezvous_key(namespace, job)
    while etcd_endpoints and not done.is_set():  # etcd (a sidecar) may still be starting
        try:
            gateway.put(etcd_endpoints, key, address)
            break
        except OSError as error:
            log.warning("rendezvous address not published yet: %s", error)
            done.wait(1.0)
    done.wait()
    log.info("rendezvous store stopping")
    del store
