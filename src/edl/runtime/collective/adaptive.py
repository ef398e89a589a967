"""Batch adaptation for a DDP script: measure the gradient noise scale, scale the LR.

The one call a collective training script makes (after building its DDP model and
optimizer, the way AdaptDL's ``AdaptiveDataParallel`` wraps them)::

    adaptive = AdaptiveBatch(ddp, optimizer, initial_batch=64)
    loader = DataLoader(data, batch_size=adaptive.local_batch_size(), sampler=...)
    ...
    loss.backward()
    adaptive.step()          # instead of optimizer.step(): measures, scales the LR, steps
    ...
    adaptive.report()        # rank 0 prints ``batch=… noise_scale=… efficiency=… gain=…``

What it does:

* a DDP **communication hook** sees each bucket of the local gradient before it is
  averaged: it adds the local squared norm, all-reduces the bucket (averaging it, as
  DDP's default hook) and adds the averaged bucket's squared norm. At `step` the local
  norms are all-reduced once more (one float64 per step), giving L (their mean) and T
  over ``count`` = world size gradients; `edl.throughput.efficiency.NoiseScaleEstimator`
  turns them into |G|², the variance and φ. With one worker the previous step's
  gradient stands in for a second one (the estimator's pair rule);
* the **learning rate** is multiplied by AdaScale's gain at scale = batch / initial
  batch (its square root for Adam-like optimisers);
* the **batch** is fixed for the life of the process: the one the job was given
  (``batch``; else the Autoscaler's choice, which it publishes in the job's etcd,
  `edl.runtime.collective.batch`; else the ``EDL_BATCH_SIZE`` variable; else the
  initial batch). Rank 0 decides and broadcasts it, so every worker of one round runs
  the same batch, and a new choice reaches the workers only at their next restart,
  which is where a collective job changes anything; the estimator's state survives
  the restart in the script's checkpoint (`state_dict` / `load_state_dict`);
* the **metrics** also carry the samples/s since the last report and the trainer
  count, so the agent's metrics record is one point of the job's goodput curve.

It leaves the script's training loop, data and checkpointing as they are. It is
separate from (and composable with) live resizing: it only needs `step` called.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from edl.runtime.collective.batch import read_batch
from edl.throughput.efficiency import NoiseScaleEstimator, efficiency

__all__ = ["BATCH_ENV", "AdaptiveBatch"]

BATCH_ENV = "EDL_BATCH_SIZE"
_ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW)


class AdaptiveBatch:
    """Measures φ through ``ddp``'s communication hook and scales ``optimizer``'s LR."""

    def __init__(
        self,
        ddp: torch.nn.parallel.DistributedDataParallel,
        optimizer: torch.optim.Optimizer,
        *,
        initial_batch: int,
        batch: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if initial_batch < 1:
            raise ValueError("initial_batch must be >= 1")
        env = os.environ if env is None else env
        self.initial_batch = initial_batch
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        rank0 = self.world == 1 or dist.get_rank() == 0
        if batch is None and rank0:  # the others take rank 0's
            batch = _given_batch(env)
        self.batch = agreed_batch(batch, initial_batch, self.world)
        self.trainers = max(1, self.world // max(1, int(env.get("LOCAL_WORLD_SIZE") or 1)))
        self._since = (time.monotonic(), 0)  # the last report's time and step count
        self._steps = 0
        self.optimizer = optimizer
        self.adaptive = isinstance(optimizer, _ADAPTIVE)
        self.estimator = NoiseScaleEstimator()
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        self._previous: torch.Tensor | None = None
        self._pieces: list[torch.Tensor] = []
        self.gain = 1.0
        # a lambda: DDP checks a hook's annotations, which this module keeps as strings
        ddp.register_comm_hook(None, lambda state, bucket: self._hook(state, bucket))

    # -- what the script uses ---------------------------------------------------------
    @property
    def scale(self) -> float:
        return self.batch / self.initial_batch

    def local_batch_size(self) -> int:
        """This worker's share of the batch."""
        return max(1, self.batch // self.world)

    def step(self) -> None:
        """After ``backward``: measure this step, scale the learning rate, step."""
        self._measure()
        self.gain = self.estimator.gain(self.scale, adaptive=self.adaptive)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * self.gain
        self.optimizer.step()
        self._steps += 1

    def noise_scale(self) -> float | None:
        return self.estimator.noise_scale(self.initial_batch)

    def metrics(self) -> dict[str, float]:
        """batch, φ, the batch's statistical efficiency and the LR gain (what is known)."""
        out = {"batch": float(self.batch), "gain": round(self.gain, 4),
               "trainers": float(self.trainers)}
        now, steps = time.monotonic(), self._steps - self._since[1]
        if steps > 0 and now > self._since[0]:
            rate = steps * self.local_batch_size() * self.world / (now - self._since[0])
            out["samples_per_s"] = round(rate, 2)
        self._since = (now, self._steps)
        phi = self.noise_scale()
        if phi is not None and math.isfinite(phi):
            out["noise_scale"] = round(phi, 2)
            out["efficiency"] = round(efficiency(phi, self.initial_batch, self.batch), 4)
        return out

    def report(self) -> None:
        """Rank 0 prints the metrics as a ``name=value`` line (the agent publishes it)."""
        if self.world == 1 or dist.get_rank() == 0:
            print(" ".join(f"{k}={v:g}" for k, v in self.metrics().items()), flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {"estimator": self.estimator.to_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.estimator = NoiseScaleEstimator.from_dict(dict(state.get("estimator") or {}))

    # -- measurement ------------------------------------------------------------------
    def _hook(self, _state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        self._local += buffer.detach().double().pow(2).sum()
        if self.world == 1:
            self._pieces.append(buffer.detach().clone())
            future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            future.set_result(buffer)
            return future
        buffer.div_(self.world)
        work = dist.all_reduce(buffer, async_op=True)
        assert work is not None

        def averaged(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            out = done.value()[0]
            self._total += out.detach().double().pow(2).sum()
            return out

        return work.get_future().then(averaged)

    def _measure(self) -> None:
        local, total = self._local, self._total
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(local)
            self.estimator.observe(float(local) / self.world, float(total), self.world,
                                   self.scale)
            return
        current = torch.cat([piece.flatten() for piece in self._pieces]) if self._pieces else None
        self._pieces = []
        if current is None:
            return
        previous, self._previous = self._previous, current
        if previous is None or previous.numel() != current.numel():
            return
        mean = (previous.double() + current.double()) / 2
        self.estimator.observe_pair(
            float(previous.double().pow(2).sum()), float(current.double().pow(2).sum()),
            float(mean.pow(2).sum()), self.scale,
        )


def agreed_batch(given: int | None, initial: int, world: int) -> int:
    """Rank 0's batch (``given``, else the initial one, at least one sample per worker),
    broadcast so every worker of the round uses the same."""
    value = torch.tensor([max(world, given or initial)], dtype=torch.int64)
    if world > 1:
        dist.broadcast(value, src=0)
    return int(value.item())


def _given_batch(env: Mapping[str, str]) -> int | None:
    """The Autoscaler's published batch (the job's etcd), else ``EDL_BATCH_SIZE``."""
    endpoints = env.get("EDL_ETCD_ENDPOINTS")
    if endpoints and env.get("EDL_JOB_NAME"):
        published = read_batch(endpoints, env.get("EDL_NAMESPACE") or "default",
                               env["EDL_JOB_NAME"])
        if published is not None:
            return published
    return _batch_from(env)


def _batch_from(env: Mapping[str, str]) -> int | None:
    text = env.get(BATCH_ENV)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{BATCH_ENV}: not a whole number: {text!r}") from None
    if value < 1:
        raise ValueError(f"{BATCH_ENV}: must be >= 1, got {value}")
    return value
