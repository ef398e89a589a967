"""Where the controller reads each job's throughput on Kubernetes: the job's own etcd.

Every master already writes its progress (samples/s, contributing trainers, samples
left) to ``/edl/<ns>/<job>/state/master/progress`` in the job's etcd, once a second.
The controller reads that key through etcd's HTTP gateway at the address the job's
pods use (`jobparser.etcd_endpoints`: the master Service's etcd port, or the job's
external etcd). Why there and not in the TrainingJob's status or a ConfigMap: those
would give every job's pods write access to the API server (a Role, a
ServiceAccount token mounted into user code), a privilege nothing else in the job
needs; this way the pods get no API access and the controller no new RBAC verb —
it needs only a network path to the job's etcd (a NetworkPolicy that isolates job
namespaces must allow the controller to reach port 2379 of the master Service).

A collective job has no master queue: its agents publish the script's metrics record
(`edl.runtime.collective.keys.metrics_key`), which `AdaptiveBatch` fills with the
trainers, samples/s, batch and φ; that record is the job's point instead.

Reads are one short HTTP request per job and tick, run off the event loop; a job
whose etcd does not answer is skipped for ``backoff_s`` so one unreachable job does
not slow every tick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
from collections.abc import Callable

from edl.local.progress import etcd_get, progress_key
from edl.runtime.collective import keys
from edl.throughput.fit import Observation
from edl.throughput.progress import observation_from_metrics, observation_from_progress

log = logging.getLogger(__name__)

Endpoint = Callable[[str, str], str | None]


class EtcdProgressSource:
    """`edl.throughput.board.ThroughputSource` over the masters' progress keys."""

    def __init__(self, endpoint_of: Endpoint, timeout_s: float = 1.0, backoff_s: float = 30.0,
                 collective: Callable[[str, str], bool] = lambda _ns, _name: False):
        self._endpoint_of = endpoint_of
        self._collective = collective
        self._timeout = timeout_s
        self._backoff = backoff_s
        self._last: dict[tuple[str, str], bytes] = {}
        self._skip_until: dict[tuple[str, str], float] = {}

    async def job_throughput(self, namespace: str, name: str, after: float) -> list[Observation]:
        key = (namespace, name)
        endpoint = self._endpoint_of(namespace, name)
        if not endpoint or self._skip_until.get(key, 0.0) > time.monotonic():
            return []
        first = endpoint.split(",")[0].strip()
        collective = self._collective(namespace, name)
        where = keys.metrics_key if collective else progress_key
        try:
            raw = await asyncio.to_thread(etcd_get, first, where(namespace, name), self._timeout)
        except (OSError, urllib.error.URLError, ValueError) as error:
            log.debug("%s/%s: progress not read from %s: %s", namespace, name, first, error)
            self._skip_until[key] = time.monotonic() + self._backoff
            return []
        if not raw or raw == self._last.get(key):
            return []  # nothing new since the last read
        self._last[key] = raw
        try:
            progress = json.loads(raw)
        except ValueError:
            return []
        read = observation_from_metrics if collective else observation_from_progress
        point = read(progress if isinstance(progress, dict) else None,
                     asyncio.get_running_loop().time())
        return [point] if point is not None and point.at > after else []

    def forget(self, namespace: str, name: str) -> None:
        self._last.pop((namespace, name), None)
        self._skip_until.pop((namespace, name), None)
