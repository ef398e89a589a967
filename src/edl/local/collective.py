"""What a local run shows of a collective job: world size, restarts, the script's metrics.

The agents write one record per rendezvous they join to the job's etcd
(`edl.runtime.collective.keys`): round, rank, nodes, world size. A new round
means every worker restarted (a resize, or a worker that died). The script's
``name=value`` lines (epoch, loss, accuracy) arrive as one metrics record. The
fold into a `RunSnapshot` is pure; reading is one HTTP range per refresh
(etcd's JSON gateway, no gRPC in the forking parent).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from edl.local.status import RunSnapshot
from edl.runtime.collective import gateway, keys

log = logging.getLogger(__name__)


@dataclass
class CollectiveView:
    """The rounds seen so far (kept across refreshes) and the latest records."""

    rounds: dict[int, int] = field(default_factory=dict)  # round -> world size
    metrics: dict[str, float] = field(default_factory=dict)


def fold(
    view: CollectiveView, agents: Mapping[str, Any], metrics: Mapping[str, Any] | None
) -> CollectiveView:
    """The view after one read of the agents' records and the metrics (pure)."""
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
    return CollectiveView(rounds, values)


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
    epoch = metrics.get("epoch")
    return replace(
        s,
        world_size=world,
        restarts=max(0, len(view.rounds) - 1),
        world_history=history,
        epoch=int(epoch) if epoch is not None else s.epoch,
        loss=metrics.get("loss", s.loss),
        accuracy=metrics.get("accuracy", s.accuracy),
    )


class CollectiveReader:
    """Reads the agents' records and the metrics of one job from etcd."""

    def __init__(self, etcd_endpoints: str, namespace: str, job: str) -> None:
        self.endpoints = etcd_endpoints
        self.prefix = keys.job_prefix(namespace, job)
        self.agents_prefix = keys.agents_prefix(namespace, job)
        self.metrics_key = keys.metrics_key(namespace, job)
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
        self.view = fold(self.view, agents, metrics if isinstance(metrics, dict) else None)
        return self.view


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
