"""One pserver's shard: parameter blocks, optimizer state, update counter.

Thread-safe: gRPC handlers apply updates from many trainers concurrently;
each update runs under one lock (asynchronous SGD, as in the original).
The shard starts uninitialised; the first trainer to send Init defines it,
later Inits are refused, so a replacement pserver with no checkpoint is
re-initialised by whichever trainer notices first.

A job that adapts its batch (``spec.batch``) sets an `Aggregation`: pushes are then
summed into updates of the job's batch (`push`; `edl.runtime.pserver.aggregate`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from edl.runtime.precondition import preconditioned_sqnorm
from edl.runtime.pserver.aggregate import Aggregation
from edl.runtime.pserver.optim import OptimizerConfig, make_optimizer

T = TypeVar("T")


@dataclass
class ShardSnapshot:
    """Plain-array copy of a shard, for checkpoints."""

    optimizer: dict
    version: int
    params: dict[str, np.ndarray]
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    # a job adapting its batch: the aggregation's state and its pending update's sums
    aggregation: dict[str, Any] | None = None
    pending: dict[str, np.ndarray] = field(default_factory=dict)


class ShardError(ValueError):
    """A request that does not fit this shard (unknown block, wrong size)."""


class Shard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.params: dict[str, torch.Tensor] = {}
        self.state: dict[str, dict[str, torch.Tensor]] = {}
        self.cfg = OptimizerConfig()
        self.optimizer = make_optimizer(self.cfg)
        self.version = 0
        self.initialized = False
        self.aggregation: Aggregation | None = None

    def init(self, params: dict[str, np.ndarray], cfg: OptimizerConfig) -> bool:
        """Adopt the first initialisation; later ones return False."""
        optimizer = make_optimizer(cfg)
        if not params:
            raise ShardError("init carries no parameters")
        with self._lock:
            if self.initialized:
                return False
            self.params = {
                k: torch.tensor(np.asarray(v, dtype=np.float32).ravel()) for k, v in params.items()
            }
            self.state = {k: {} for k in self.params}
            self.cfg, self.optimizer = cfg, optimizer
            self.version = 0
            self.initialized = True
            return True

    def apply(self, grads: dict[str, np.ndarray]) -> None:
        """One asynchronous update from one trainer's gradients."""
        with self._lock:
            self._check(grads)
            for key, grad in grads.items():
                g = torch.from_numpy(np.asarray(grad, dtype=np.float32).ravel())
                self.optimizer.step(self.params[key], g, self.state[key])
            self.version += 1

    def push(self, grads: dict[str, np.ndarray], samples: int = 0,
             sqnorm: float | None = None) -> bool:
        """One trainer's push: applied at once, or (a job adapting its batch) added to
        the pending update, applied when it holds the job's batch. ``sqnorm``: the
        trainer's |g|² of these blocks (computed here when absent, and always for Adam,
        which measures through its preconditioner). False: dropped (not finite)."""
        aggregation = self.aggregation
        if aggregation is None:
            self.apply(grads)
            return True
        if samples < 1:
            raise ShardError("push carries no sample count (samples): a job adapting its "
                             "batch needs each push's samples (job.step(loss, samples=...))")
        with self._lock:
            self._check(grads)
            flat = {k: torch.from_numpy(np.asarray(g, dtype=np.float32).ravel())
                    for k, g in grads.items()}
            if sqnorm is None or self.optimizer.adaptive:
                sqnorm = sum(preconditioned_sqnorm(g, self._precondition(k))
                             for k, g in flat.items())
            elif not all(math.isfinite(float(g.sum())) for g in flat.values()):
                sqnorm = math.nan  # the sent norm disagrees with the gradient: never apply it
            if not aggregation.add(flat, samples, float(sqnorm)):
                return math.isfinite(sqnorm)
            self._update(aggregation)
            return True

    def flush_stale(self) -> bool:
        """Apply an incomplete update that waited too long (True when one was applied)."""
        with self._lock:
            aggregation = self.aggregation
            if aggregation is None or not aggregation.stale():
                return False
            self._update(aggregation)
            return True

    @property
    def changes(self) -> tuple[int, int]:
        """What a checkpoint must keep: updates applied, and pushes taken into a pending
        update (which change no version until the update completes)."""
        aggregation = self.aggregation
        return self.version, 0 if aggregation is None else aggregation.received

    def set_batch_target(self, batch: int) -> None:
        """The job's batch for the next updates (the one being gathered included)."""
        with self._lock:
            if self.aggregation is not None:
                self.aggregation.target = max(1, int(batch))

    def set_job_estimate(self, estimate: tuple[float, float] | None) -> None:
        """(variance, |G|²) over every shard: the gain all shards scale their LR by."""
        with self._lock:
            if self.aggregation is not None:
                self.aggregation.job_estimate = estimate

    def aggregation_record(self) -> dict[str, Any] | None:
        """The aggregation's published figures (None: the job does not adapt its batch)."""
        with self._lock:
            aggregation = self.aggregation
            return None if aggregation is None else aggregation.record(self.optimizer.adaptive)

    def _update(self, aggregation: Aggregation) -> None:
        mean, lr_scale = aggregation.take(self._precondition, self.optimizer.adaptive)
        for key, grad in mean.items():
            self.optimizer.step(self.params[key], grad, self.state[key], lr_scale)
        self.version += 1

    def _precondition(self, key: str) -> torch.Tensor | None:
        return self.optimizer.preconditioner(self.state[key])

    def _check(self, grads: dict[str, np.ndarray]) -> None:
        if not self.initialized:
            raise ShardError("shard not initialised")
        for key, grad in grads.items():
            param = self.params.get(key)
            if param is None:
                raise ShardError(f"unknown block {key!r}")
            if grad.size != param.numel():
                raise ShardError(
                    f"block {key!r}: gradient has {grad.size} elements, "
                    f"expected {param.numel()}"
                )

    def read(self) -> tuple[int, dict[str, np.ndarray]]:
        """(version, copy of every block) taken atomically."""
        with self._lock:
            return self.version, {k: v.numpy().copy() for k, v in self.params.items()}

    def read_into(self, encode: Callable[[str, np.ndarray], T]) -> tuple[int, list[T]]:
        """(version, encode(id, block) for every block), one copy, taken atomically."""
        with self._lock:
            return self.version, [encode(k, v.numpy()) for k, v in self.params.items()]

    def snapshot(self) -> ShardSnapshot:
        with self._lock:
            meta, pending = (None, {}) if self.aggregation is None else self.aggregation.state()
            return ShardSnapshot(
                optimizer=self.cfg.to_dict(),
                version=self.version,
                params={k: v.numpy().copy() for k, v in self.params.items()},
                state={
                    k: {n: t.numpy().copy() for n, t in s.items()} for k, s in self.state.items()
                },
                aggregation=meta,
                pending=pending,
            )

    def restore(self, snap: ShardSnapshot) -> None:
        cfg = OptimizerConfig(**snap.optimizer)
        with self._lock:
            self.cfg, self.optimizer = cfg, make_optimizer(cfg)
            self.params = {k: torch.from_numpy(v.copy()) for k, v in snap.params.items()}
            self.state = {
                k: {n: torch.from_numpy(a.copy()) for n, a in snap.state.get(k, {}).items()}
                for k in self.params
            }
            self.version = snap.version
            self.initialized = True
            if self.aggregation is not None and snap.aggregation is not None:
                self.aggregation.restore(snap.aggregation, snap.pending)
