"""Checkpoint health and stalls of running jobs on Kubernetes, read from each job's etcd.

The runtime already publishes what the controller needs where `edl run` reads it: each
pserver its checkpoint health (``state/checkpoint-health/<index>``, see
`edl.local.checkpoints`; a collective job's rank 0 its own there, ``.../rank0``,
probed by its agent), the master its progress, a collective job's agents their
metrics and rendezvous. The controller reads them as it reads throughput
(`edl.kube.throughput`: the etcd gateway at the address the job's pods use, no API
access for the pods). A stall is judged as `edl run` judges it (`edl.local.stall`),
its warning time and optional limit set by the annotations
``edl.dev/stall-warning-s`` and ``edl.dev/stall-limit-s``.

`check` never waits: it returns what the last read found and starts the next read in
the background, so a job whose etcd is slow or away never holds up another job's
status. A job whose etcd does not answer is left alone for ``backoff_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from edl.api.trainingjob import TrainingJob
from edl.control.job_health import JobHealth
from edl.local.checkpoints import failing_now, health_prefix, parse_records
from edl.local.progress import progress_key
from edl.local.stall import StallWatch
from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)

ANNOTATION_STALL_WARNING = "edl.dev/stall-warning-s"
ANNOTATION_STALL_LIMIT = "edl.dev/stall-limit-s"

Endpoint = Callable[[TrainingJob], str | None]
Names = Callable[[str, str], list[str]]


def _seconds(job: TrainingJob, annotation: str) -> float | None:
    text = (job.metadata.annotations or {}).get(annotation)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        log.warning("%s/%s: %s=%r is not a number of seconds > 0; ignored",
                    job.metadata.namespace, job.metadata.name, annotation, text)
        return None
    return value


def _mark(job: TrainingJob, endpoints: str, timeout: float) -> Hashable:
    """What moves while the job makes progress (blocking; OSError when etcd is away)."""
    namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
    if job.collective():
        found = gateway.get_prefix(endpoints, keys.job_prefix(namespace, name), timeout)
        return (found.get(keys.metrics_key(namespace, name)),
                found.get(keys.rendezvous_key(namespace, name)))
    raw = gateway.get(endpoints, progress_key(namespace, name), timeout)
    try:
        progress = json.loads(raw) if raw else {}
    except ValueError:
        progress = {}
    if not isinstance(progress, dict):
        progress = {}
    return (str(progress.get("pass")), str(progress.get("tasks_done")),
            str(progress.get("finished")))


@dataclass
class _Job:
    watch: StallWatch
    checkpoint: str = ""
    stall: str = ""
    fatal: str = ""
    reading: asyncio.Task[None] | None = None
    skip_until: float = 0.0
    running: bool = False
    settings: tuple[float | None, float | None] = (None, None)
    trainers: list[str] = field(default_factory=list)


class EtcdJobHealth:
    """`edl.control.job_health.HealthSource` over the jobs' own etcd."""

    def __init__(self, endpoint_of: Endpoint, trainers_of: Names, *, timeout_s: float = 1.0,
                 backoff_s: float = 30.0) -> None:
        self._endpoint_of = endpoint_of
        self._trainers_of = trainers_of
        self._timeout = timeout_s
        self._backoff = backoff_s
        self._jobs: dict[tuple[str, str], _Job] = {}

    def check(self, job: TrainingJob, running: bool) -> JobHealth:
        key = (job.metadata.namespace or "default", job.metadata.name or "")
        settings = (_seconds(job, ANNOTATION_STALL_WARNING),
                    _seconds(job, ANNOTATION_STALL_LIMIT))
        known = self._jobs.get(key)
        if known is None or known.settings != settings:
            watch = StallWatch(*settings, limit_name=ANNOTATION_STALL_LIMIT)
            known = self._jobs[key] = _Job(watch, settings=settings)
        known.running = running
        if running:
            known.trainers = self._trainers_of(*key)
        endpoints = self._endpoint_of(job)
        idle = known.reading is None or known.reading.done()
        if endpoints and idle and time.monotonic() >= known.skip_until:
            known.reading = asyncio.get_running_loop().create_task(
                self._read(job, known, endpoints), name=f"health of {key[0]}/{key[1]}")
        return JobHealth(known.checkpoint, known.stall, known.fatal)

    async def _read(self, job: TrainingJob, known: _Job, endpoints: str) -> None:
        namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
        try:
            raw = await asyncio.to_thread(gateway.get_prefix, endpoints,
                                          health_prefix(namespace, name), self._timeout)
            mark = await asyncio.to_thread(_mark, job, endpoints, self._timeout)
        except OSError as error:
            log.debug("%s/%s: health not read from %s: %s", namespace, name, endpoints, error)
            known.skip_until = time.monotonic() + self._backoff
            return
        known.checkpoint = failing_now(parse_records(raw))
        running = known.trainers if known.running else []
        lines, fatal = known.watch.observe(mark, time.monotonic(), running)
        if known.watch.stalled:
            known.stall = next((line for line in lines if line.startswith("no progress")),
                               known.stall)
        else:
            known.stall = ""
        known.fatal = known.fatal or fatal

    def forget(self, namespace: str, name: str) -> None:
        known = self._jobs.pop((namespace, name), None)
        if known is not None and known.reading is not None:
            known.reading.cancel()
