"""`edl rendezvous`: the master pod of a collective job hosts the c10d store.

A `torch.distributed.TCPStore` server on ``0.0.0.0:EDL_PORT``: torch's dynamic
rendezvous keeps its state in it (compare-and-set on one key per job), so every
agent of the job meets here. Its address ``EDL_POD_IP:port`` is written to the
job's etcd (`keys.rendezvous_key`), where agents look it up when the master
Service's name is not set (local runs). The state lives in this process's
memory: if the master pod is replaced, the agents' next store call fails, their
pods fail and are replaced, and they meet again at the new store — training
resumes from the script's last checkpoint.

Stopping: SIGTERM/SIGINT are blocked before torch starts its threads (they inherit
the mask) and the main thread takes them with ``sigtimedwait``. With a Python
handler instead, the kernel may deliver a process-directed SIGTERM to torch's
``pt_tcpstore_uv`` thread: the handler is then only flagged, the main thread stays
asleep in its wait, and the pod is SIGKILLed after its grace period (exit 137 at
the end of a successful run, about one run in four).
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import timedelta

from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
POLL_S = 0.5


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
    take_signals = threading.current_thread() is threading.main_thread()
    if take_signals:  # before torch's threads exist: only this thread receives them
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    from torch.distributed import TCPStore

    store = TCPStore(
        host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60),
        multi_tenant=True,
    )
    address = f"{advertise}:{store.port}"
    log.info("c10d rendezvous store listening on %s:%d (advertised %s)", host, store.port, address)
    done = stop or threading.Event()

    def stopped(wait_s: float) -> bool:
        """Wait up to ``wait_s`` for a stop signal or ``stop``; True once asked to stop."""
        if take_signals:
            taken = signal.sigtimedwait(STOP_SIGNALS, wait_s)
            if taken is not None:
                log.info("%s received", signal.Signals(taken.si_signo).name)
                done.set()
        else:
            done.wait(wait_s)
        return done.is_set()

    key = keys.rendezvous_key(namespace, job)
    while etcd_endpoints and not done.is_set():  # etcd (a sidecar) may still be starting
        try:
            gateway.put(etcd_endpoints, key, address)
            break
        except OSError as error:
            log.warning("rendezvous address not published yet: %s", error)
            stopped(1.0)
    while not stopped(POLL_S):
        pass
    log.info("rendezvous store stopping")
    del store
