"""What a live worker is given: its contract with `edl agent` (the EDL_LIVE_* variables),
its part of each step (`Batch`), and what a batch chooser must offer the loop
(`BatchControl`, which `edl.runtime.collective.adaptive.AdaptiveBatch` implements)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import torch

__all__ = ["Batch", "BatchControl", "LiveConfig", "live_config"]


@dataclass(frozen=True)
class Batch:
    """This worker's part of one step: dataset ``indices``; ``scale`` turns a loss summed
    over them into this worker's part of the mean over the whole step (DDP averages the
    gradients over workers, whose parts may differ by a sample)."""

    indices: list[int]
    epoch: int
    step: int
    global_size: int
    world: int

    @property
    def scale(self) -> float:
        return self.world / self.global_size if self.global_size else 0.0


@dataclass(frozen=True)
class LiveConfig:
    """A live worker's contract with `edl agent` (EDL_LIVE_* variables)."""

    store: str  # host:port of the job's rendezvous store
    prefix: str
    ident: str
    min_world: int
    max_world: int
    arrive_timeout_s: float = 3.0
    group_timeout_s: float = 60.0
    last_call_s: float = 1.0
    orphan_s: float = 30.0
    world_sizes: tuple[int, ...] = ()  # the spec's allowed world sizes (empty: any)


def live_config(env: Mapping[str, str]) -> LiveConfig | None:
    """The live contract from the environment; None outside a live collective job."""
    store = env.get("EDL_LIVE_STORE", "").strip()
    if not store:
        return None
    job = env.get("EDL_JOB_NAME") or "edl-job"
    namespace = env.get("EDL_NAMESPACE") or "default"
    return LiveConfig(
        store=store,
        prefix=env.get("EDL_LIVE_PREFIX") or f"edl-live/{namespace}/{job}",
        ident=env.get("EDL_LIVE_IDENT") or f"{env.get('EDL_POD_NAME', 'local')}/{os.getpid()}",
        min_world=int(env.get("EDL_LIVE_MIN_WORLD") or 1),
        max_world=int(env.get("EDL_LIVE_MAX_WORLD") or 1),
        arrive_timeout_s=float(env.get("EDL_LIVE_ARRIVE_TIMEOUT") or 3.0),
        world_sizes=tuple(int(n) for n in (env.get("EDL_WORLD_SIZES") or "").split(",")
                          if n.strip()),
    )


class BatchControl(Protocol):
    """The total batch of a live world, which may change at a step boundary.

    The loop calls `attach` with each world's model wrapper (the world's rank 0's batch
    is agreed there), asks rank 0 for `published` at every step boundary and, when it
    names a batch other than `batch`, every worker calls `set_batch` with it after the
    boundary's all-reduce, before the next step: all workers change together."""

    batch: int

    def attach(self, model: torch.nn.Module) -> None: ...

    def published(self) -> int | None: ...

    def set_batch(self, total: int) -> None: ...

    def local_batch_size(self) -> int: ...
