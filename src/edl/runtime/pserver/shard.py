"""One pserver's shard: parameter blocks, optimizer state, update counter.

Thread-safe: gRPC handlers apply updates from many trainers concurrently;
each update runs under one lock (asynchronous SGD, as in the original).
The shard starts uninitialised; the first trainer to send Init defines it,
later Inits are refused, so a replacement pserver with no checkpoint is
re-initialised by whichever trainer notices first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

from edl.runtime.pserver.optim import OptimizerConfig, make_optimizer

T = TypeVar("T")


@dataclass
class ShardSnapshot:
    """Plain-array copy of a shard, for checkpoints."""

    optimizer: dict
    version: int
    params: dict[str, np.ndarray]
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


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
            for key, grad in grads.items():
                g = torch.from_numpy(np.asarray(grad, dtype=np.float32).ravel())
                self.optimizer.step(self.params[key], g, self.state[key])
            self.version += 1

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
            return ShardSnapshot(
                optimizer=self.cfg.to_dict(),
                version=self.version,
                params={k: v.numpy().copy() for k, v in self.params.items()},
                state={
                    k: {n: t.numpy().copy() for n, t in s.items()} for k, s in self.state.items()
                },
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
