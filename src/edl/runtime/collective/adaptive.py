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
* with Adam or AdamW the norms are taken of the gradient divided by Adam's
  preconditioner √v̂ + ε (`edl.runtime.precondition`, AdaptDL PR #95), the noise Adam's
  steps actually see, once Adam has taken a few steps;
* the **learning rate** is multiplied by AdaScale's gain at scale = batch / initial
  batch (its square root for Adam-like optimisers);
* a step whose gradient is not finite (its all-reduced squared norm, the same on every
  worker) is neither measured nor applied: `step` skips the optimizer (AdaptDL PR #75);
* the **batch** starts as the one the job was given (``batch``; else the Autoscaler's
  choice, which it publishes in the job's etcd, `edl.runtime.collective.batch`; else
  the ``EDL_BATCH_SIZE`` variable; else the initial batch). Rank 0 decides and
  broadcasts it, so every worker of one world runs the same batch. Under torchrun
  a new choice reaches the workers when their world next re-forms (a resize or a
  failure; none is made for a batch); the estimator's state survives the restart in
  the script's checkpoint (`state_dict` / `load_state_dict`). Under a live
  `edl.elastic.ElasticLoop`
  (``ElasticLoop(..., adaptive=AdaptiveBatch(None, optimizer, ...))``) the loop
  calls `attach` with each world's DDP wrapper, rank 0 polls the published batch
  (`published`, every ``poll_s`` in a thread of its own) and every worker takes it at
  the next step boundary (`set_batch`): no restart, no re-formation;
* the **metrics** also carry the samples/s since the last report and the trainer
  count, so the agent's metrics record is one point of the job's goodput curve, and
  the ``compute_rate``: one trainer's samples/s computing alone (from the forward's
  start to the backward's last gradient bucket, over the last 20 steps, times the
  workers per trainer), which splits a step into what a larger batch scales and the
  overhead it amortises (`edl.throughput.batch`; without it the policy sees no
  overhead in a curve known at one trainer count and finds no larger batch worth it).

It leaves the script's training loop, data and checkpointing as they are. It is
separate from (and composable with) live resizing: it only needs `step` called.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from edl.runtime.collective.batch import read_batch
from edl.runtime.collective.resize_pause import measured_pause
from edl.runtime.precondition import adam_preconditioner
from edl.runtime.precondition import sqnorm_tensor as _sqnorm
from edl.throughput.efficiency import NoiseScaleEstimator, efficiency

__all__ = ["BATCH_ENV", "AdaptiveBatch"]

BATCH_ENV = "EDL_BATCH_SIZE"
_COMPUTE_STEPS = 20  # the compute rate's window
_ADAPTIVE = (torch.optim.Adam, torch.optim.AdamW)


class AdaptiveBatch:
    """Measures φ through ``ddp``'s communication hook and scales ``optimizer``'s LR."""

    def __init__(
        self,
        ddp: torch.nn.parallel.DistributedDataParallel | None,
        optimizer: torch.optim.Optimizer,
        *,
        initial_batch: int,
        batch: int | None = None,
        env: Mapping[str, str] | None = None,
        poll_s: float = 3.0,
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
        self._since = (time.monotonic(), 0)  # the last report's time and sample count
        self._steps = 0
        self._samples = 0  # trained by the whole world (the batch may change between steps)
        self.optimizer = optimizer
        self.adaptive = isinstance(optimizer, _ADAPTIVE)
        self.estimator = NoiseScaleEstimator()
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        self._previous: torch.Tensor | None = None
        self._pieces: list[torch.Tensor] = []
        self._preconditioners: list[torch.Tensor | None] = []
        self._groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self.skipped_steps = 0
        self.gain = 1.0
        self._env = env
        self.pause: dict[str, float] = {}  # this world's restart pause, from its first step
        self._poll = _BatchPoll(env, poll_s)
        self._forward_at: float | None = None  # this step's forward began (monotonic)
        self._grads_at: float | None = None  # its last gradient bucket was ready
        self._compute: deque[tuple[int, float]] = deque(maxlen=_COMPUTE_STEPS)
        if ddp is not None:
            self._register(ddp)

    def _register(self, ddp: torch.nn.parallel.DistributedDataParallel) -> None:
        # a lambda: DDP checks a hook's annotations, which this module keeps as strings
        ddp.register_comm_hook(None, lambda state, bucket: self._hook(state, bucket))
        ddp.register_forward_pre_hook(lambda _module, _args: self._forward_started())

    def _forward_started(self) -> None:
        if self._forward_at is None:  # the step's first forward (accumulation: more)
            self._forward_at = time.monotonic()

    # -- a live world (`edl.elastic.BatchControl`) ------------------------------------
    def attach(self, model: torch.nn.Module) -> None:
        """A new world formed around ``model`` (its DDP wrapper, if any): measure through
        it, and agree rank 0's batch. A step half-measured in the old world is dropped."""
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.trainers = max(1, self.world // max(1, int(self._env.get("LOCAL_WORLD_SIZE") or 1)))
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        self._previous, self._pieces, self._preconditioners = None, [], []
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            self._register(model)
        self.batch = agreed_batch(self.batch, self.initial_batch, self.world)

    def published(self) -> int | None:
        """The newest batch published for the job (None: none, or no etcd to ask)."""
        return self._poll.latest()

    def set_batch(self, total: int) -> None:
        """Run ``total`` samples per step from the next one (at least one per worker)."""
        self.batch = max(self.world, int(total))

    # -- what the script uses ---------------------------------------------------------
    @property
    def scale(self) -> float:
        return self.batch / self.initial_batch

    def local_batch_size(self) -> int:
        """This worker's share of the batch."""
        return max(1, self.batch // self.world)

    def step(self) -> None:
        """After ``backward``: measure this step, scale the learning rate, step (not
        with a gradient that is not finite: then the step is skipped)."""
        if not self._measure():
            self.skipped_steps += 1
            return
        self.gain = self.estimator.gain(self.scale, adaptive=self.adaptive)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * self.gain
        self.optimizer.step()
        self._samples += self.local_batch_size() * self.world
        if self._forward_at is not None and self._grads_at is not None:
            seconds = self._grads_at - self._forward_at
            if seconds > 0:
                self._compute.append((self.local_batch_size(), seconds))
        self._forward_at = self._grads_at = None
        if self._steps == 0:  # the first step of this world: the restart's pause ends
            self.pause = measured_pause(self._env)
        self._steps += 1

    def noise_scale(self) -> float | None:
        return self.estimator.noise_scale(self.initial_batch)

    def metrics(self) -> dict[str, float]:
        """batch, φ, the batch's statistical efficiency and the LR gain (what is known);
        after a restart, its measured pause (`edl.runtime.collective.resize_pause`)."""
        out = {"batch": float(self.batch), "gain": round(self.gain, 4),
               "trainers": float(self.trainers), **self.pause}
        now, samples = time.monotonic(), self._samples - self._since[1]
        if samples > 0 and now > self._since[0]:
            out["samples_per_s"] = round(samples / (now - self._since[0]), 2)
        self._since = (now, self._samples)
        seconds = sum(s for _, s in self._compute)
        if seconds > 0:
            per_worker = sum(n for n, _ in self._compute) / seconds
            workers = max(1, int(self._env.get("LOCAL_WORLD_SIZE") or 1))
            out["compute_rate"] = round(per_worker * min(workers, self.world), 2)
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
        self._grads_at = time.monotonic()  # the last bucket's call: the backward is done
        preconditioner = self._bucket_preconditioner(bucket, buffer.numel())
        self._local += _sqnorm(buffer, preconditioner)
        if self.world == 1:
            self._pieces.append(buffer.detach().clone())
            self._preconditioners.append(preconditioner)
            future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            future.set_result(buffer)
            return future
        buffer.div_(self.world)
        work = dist.all_reduce(buffer, async_op=True)
        assert work is not None

        def averaged(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            out = done.value()[0]
            self._total += _sqnorm(out, preconditioner)
            return out

        return work.get_future().then(averaged)

    def _bucket_preconditioner(self, bucket: dist.GradBucket, size: int) -> torch.Tensor | None:
        """Adam's √v̂ + ε laid out as the bucket's flat buffer (None: SGD-like, or Adam
        before its first few steps)."""
        if not self.adaptive:
            return None
        pieces = []
        for param in bucket.parameters():
            group = self._groups.get(id(param))
            state = self.optimizer.state.get(param) or {}
            step = float(state.get("step", 0)) if state else 0.0
            piece = None if group is None else adam_preconditioner(
                state.get("exp_avg_sq"), step, group["betas"][1], group["eps"])
            if piece is None:
                return None  # every parameter steps together: none is warmed up yet
            pieces.append(piece.reshape(-1))
        flat = torch.cat(pieces) if pieces else None
        return flat if flat is not None and flat.numel() == size else None

    def _measure(self) -> bool:
        """Feed this step to the estimator; False when its gradient is not finite."""
        local, total = self._local, self._total
        self._local = torch.zeros((), dtype=torch.float64)
        self._total = torch.zeros((), dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(local)  # the same sum on every worker: all skip, or none
            if not (math.isfinite(float(local)) and math.isfinite(float(total))):
                return False
            self.estimator.observe(float(local) / self.world, float(total), self.world,
                                   self.scale)
            return True
        pieces, self._pieces = self._pieces, []
        preconditioners, self._preconditioners = self._preconditioners, []
        if not math.isfinite(float(local)):
            return False
        if not pieces:
            return True
        current = torch.cat([piece.flatten() for piece in pieces])
        preconditioner = (None if any(p is None for p in preconditioners)
                          else torch.cat([p for p in preconditioners if p is not None]))
        previous, self._previous = self._previous, current
        if previous is None or previous.numel() != current.numel():
            return True
        mean = (previous.double() + current.double()) / 2
        self.estimator.observe_pair(
            _sqnorm(previous, preconditioner).item(), _sqnorm(current, preconditioner).item(),
            _sqnorm(mean, preconditioner).item(), self.scale,
        )
        return True


class _BatchPoll:
    """The job's published batch, read every ``interval_s`` by a daemon thread (started at
    the first question), so a slow or dead etcd never holds up a step."""

    def __init__(self, env: Mapping[str, str], interval_s: float) -> None:
        endpoints, job = env.get("EDL_ETCD_ENDPOINTS"), env.get("EDL_JOB_NAME")
        self._where = ((endpoints, env.get("EDL_NAMESPACE") or "default", job)
                       if endpoints and job else None)
        self._interval = interval_s
        self._value: int | None = None
        self._thread: threading.Thread | None = None

    def latest(self) -> int | None:
        if self._where is None:
            return None
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="edl-batch-poll")
            self._thread.start()
        return self._value

    def _run(self) -> None:
        assert self._where is not None
        while True:
            value = read_batch(*self._where)
            if value is not None:
                self._value = value
            time.sleep(self._interval)


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
