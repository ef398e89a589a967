"""What a local run shows of a collective job: world size, restarts, the script's metrics.

The agents write one record per rendezvous they join to the job's etcd
(`edl.runtime.collective.keys`): round, rank, nodes, world size. A new round
means every worker restarted (a resize, or a worker that died). The script's
``name=value`` lines (epoch, loss, accuracy) arrive as one metrics record. Each
agent also records its workers' last failure (the script's exception line and the
restarts torch has left), which becomes one event line per failure and, when the
same error repeats with no progress, a crash loop that ends the run. The fold into
a `RunSnapshot` is pure; reading is one HTTP range per refresh
(etcd's JSON gateway, no gRPC in the forking parent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from edl.local.snapshot import mark_start
from edl.local.status import RunSnapshot
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.failures import is_lost_peer

log = logging.getLogger(__name__)


@dataclass
class CollectiveView:
    """The rounds seen so far (kept across refreshes) and the latest records."""

    rounds: dict[int, int] = field(default_factory=dict)  # round -> world size
    metrics: dict[str, float] = field(default_factory=dict)
    # pod -> its agent's last worker failure: error, restarts_left, max_restarts, failures
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerFailure:
    """One new failure of a pod's workers, as its agent recorded it."""

    pod: str
    error: str  # the script's exception line ('' when none was printed: a kill)
    restarts_left: int | None
    max_restarts: int | None
    times: int = 1  # failures since the last read (reads may miss some records)
    live: bool = False  # spec.collective.live: the agent restarts one worker, which rejoins
    how: str = ""  # a live worker's end: 'killed by SIGKILL', 'exited with status 1'

    def event(self) -> str:
        """The line `edl run` prints: what failed, and that (and how often) it is retried."""
        if self.live:
            what = (f"the script failed: {self.error}" if self.error
                    else f"a worker {self.how or 'failed'}")
            retry = "the agent restarts it, it rejoins the live world"
            if self.restarts_left is not None and self.max_restarts is not None:
                retry += (f" ({self.restarts_left} of {self.max_restarts} restarts left, "
                          "spec.collective.max-restarts)")
            return f"trainer {self.pod}: {what}; {retry}"
        what = f"the script failed: {self.error}" if self.error else "its workers failed"
        retry = "torch restarts them"
        if self.restarts_left is not None and self.max_restarts is not None:
            retry += (f" ({self.restarts_left} of {self.max_restarts} restarts left, "
                      "spec.collective.max-restarts)")
        return f"trainer {self.pod}: {what}; {retry}"


def new_failures(before: CollectiveView, after: CollectiveView) -> list[WorkerFailure]:
    """Failures recorded since ``before`` (pure): a pod's count went up."""
    found = []
    for pod, record in sorted(after.failures.items()):
        count = _count(record.get("failures"))
        previous = _count(before.failures.get(pod, {}).get("failures")) or 0
        if count is None or count <= previous:
            continue
        error, how = record.get("error"), record.get("how")
        found.append(WorkerFailure(
            pod.rsplit("/", 1)[-1], error if isinstance(error, str) else "",
            _count(record.get("restarts_left")), _count(record.get("max_restarts")),
            count - previous, record.get("live") is True, how if isinstance(how, str) else ""))
    return found


@dataclass
class CrashStreak:
    """Worker failures in a row with the same script error and no epoch in between.

    A script that raises at once is restarted by torch up to max-restarts times in
    every pod (100 by default), and a failed pod is replaced until the trainer Job's
    backoffLimit: many minutes of restarts. `edl run` ends such a run after
    ``--max-error-exits`` of them, with the line. A failure that only says a peer went
    away (the other pods' side of one script's error) neither counts nor breaks a streak.
    """

    error: str = ""
    epoch: int | None = None
    count: int = 0

    def add(self, failure: WorkerFailure, epoch: int | None) -> int:
        if not failure.error or is_lost_peer(failure.error):  # a kill, or the others' side
            return self.count
        same = failure.error == self.error and epoch == self.epoch
        self.count = (self.count if same else 0) + failure.times
        self.error, self.epoch = failure.error, epoch
        return self.count


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fold(
    view: CollectiveView, agents: Mapping[str, Any], metrics: Mapping[str, Any] | None,
    failures: Mapping[str, Any] | None = None,
) -> CollectiveView:
    """The view after one read of the agents' records, the metrics and failures (pure)."""
    rounds = dict(view.rounds)
    for record in agents.values():
        if not isinstance(record, Mapping):
            continue
        number, world = record.get("round"), record.get("world_size")
        if isinstance(number, int) and isinstance(world, int):
            rounds[number] = max(world, rounds.get(number, 0))
    values = dict(view.metrics)
    for name, value in (metrics or {}).items():
        if isinstance(value, int | float):
            values[name] = float(value)
    failed = dict(view.failures)
    for pod, record in (failures or {}).items():
        if isinstance(record, Mapping):
            failed[pod] = dict(record)
    return CollectiveView(rounds, values, failed)


def apply_collective(s: RunSnapshot, view: CollectiveView, elapsed_s: float) -> RunSnapshot:
    """Fold the view into the snapshot: world size, restarts, history, metrics (pure)."""
    history = list(s.world_history)
    world = s.world_size
    if view.rounds:
        latest = max(view.rounds)
        world = view.rounds[latest]
        if not history or history[-1][2] != latest:
            history.append([round(elapsed_s, 2), world, latest])
    metrics = view.metrics
    epoch, epochs = metrics.get("epoch"), metrics.get("epochs")
    started = s.training_started_at
    if started is None and epoch is not None and epoch >= 1:  # the script reports epochs
        started = time.time()
    return mark_start(s, replace(
        s,
        world_size=world,
        restarts=max(0, len(view.rounds) - 1),
        world_history=history,
        training_started_at=started,
        epoch=int(epoch) if epoch is not None else s.epoch,
        epochs=int(epochs) if epochs is not None and epochs >= 1 else s.epochs,
        loss=metrics.get("loss", s.loss),
        accuracy=metrics.get("accuracy", s.accuracy),
        batch=metrics.get("batch", s.batch),  # `edl.runtime.collective.adaptive`
        noise_scale=metrics.get("noise_scale", s.noise_scale),
        efficiency=metrics.get("efficiency", s.efficiency),
    ))


class CollectiveReader:
    """Reads the agents' records and the metrics of one job from etcd."""

    def __init__(self, etcd_endpoints: str, namespace: str, job: str) -> None:
        self.endpoints = etcd_endpoints
        self.prefix = keys.job_prefix(namespace, job)
        self.agents_prefix = keys.agents_prefix(namespace, job)
        self.metrics_key = keys.metrics_key(namespace, job)
        self.failures_prefix = keys.failures_prefix(namespace, job)
        self.view = CollectiveView()

    async def read(self) -> CollectiveView:
        """The view now; the previous one when etcd does not answer."""
        try:
            raw = await asyncio.to_thread(
                gateway.get_prefix, self.endpoints, self.prefix
            )
        except OSError as error:
            log.debug("collective state not read: %s", error)
            return self.view
        agents = {k: _json(v) for k, v in raw.items() if k.startswith(self.agents_prefix)}
        metrics = _json(raw.get(self.metrics_key, ""))
        failures = {k: _json(v) for k, v in raw.items() if k.startswith(self.failures_prefix)}
        self.view = fold(self.view, agents, metrics if isinstance(metrics, dict) else None,
                         failures)
        return self.view


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _ignore(text: str) -> None:
    """The default event/fatal sink: nothing."""


class CollectiveMonitor:
    """What `edl run` keeps of a collective job between refreshes: the reader, the
    crash streak, and the script's last error (put first in a failed run's reason)."""

    def __init__(self, reader: CollectiveReader, max_error_exits: int) -> None:
        self.reader = reader
        self.max_error_exits = max_error_exits
        self.crashes = CrashStreak()
        self.script_error = ""

    async def refresh(
        self, s: RunSnapshot, elapsed_s: float,
        on_event: Callable[[str], None] = _ignore, on_fatal: Callable[[str], None] = _ignore,
    ) -> RunSnapshot:
        """The snapshot with the job's view; each new failure is an event, a crash loop fatal."""
        before, world, batch = self.reader.view, s.world_size, s.batch
        view = await self.reader.read()
        s = apply_collective(s, view, elapsed_s)
        if world is not None and s.world_size is not None and s.world_size != world:
            on_event(f"world {world} -> {s.world_size} (round {max(view.rounds)})")
        if batch is not None and s.batch is not None and s.batch != batch:  # adaptive batch
            on_event(f"batch {batch:g} -> {s.batch:g} (the workers run the new batch)")
        for failure in new_failures(before, view):
            on_event(failure.event())
            self.script_error = failure.error or self.script_error
            streak = self.crashes.add(failure, s.epoch)
            if streak >= self.max_error_exits:
                on_fatal(f"trainer crash loop: the script failed {streak} times in a row with "
                         f"the same error and no epoch finished: {failure.error}")
        return s

    def reason(self, message: str) -> str:
        """A failed run's reason with the script's own error first (unless it is in it)."""
        if self.script_error and self.script_error not in message:
            return f"the script failed: {self.script_error}; {message}"
        return message

