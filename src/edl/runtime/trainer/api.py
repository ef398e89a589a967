"""The user API: an elastic, fault-tolerant training loop that reads like plain PyTorch.

    job = edl.runtime.trainer.connect(model, optimizer="adam", lr=1e-3)
    for x, y in job.batches(train_set, batch_size=64):
        job.step(F.cross_entropy(model(x), y))
    job.report(accuracy=evaluate(model))

`batches` asks the master for tasks (ranges of sample indices) until every
pass is done, and tells it when each task is finished; `step` backpropagates,
pushes the gradients to the pservers and loads the updated parameters they
send back. Pservers and the master are found through etcd and followed when
they move. On SIGTERM (a scale-down) the current task goes back to the master
and the process exits within 2 s.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from edl.runtime import tensors
from edl.runtime.config import RuntimeConfig, compute_threads, from_env
from edl.runtime.heap import freeze_startup_heap
from edl.runtime.malloc import tune_malloc
from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.pserver.optim import OptimizerConfig, make_optimizer
from edl.runtime.pserver.partition import DEFAULT_BLOCK_SIZE, Block, partition
from edl.runtime.pserver.server import optimizer_to_proto
from edl.runtime.trainer.clients import (
    Reconnecting,
    Resolver,
    master_client,
    pserver_client,
)

log = logging.getLogger("edl.trainer")
SIGTERM_EXIT = 128 + signal.SIGTERM


class ParameterLayout:
    """Which slice of which parameter lives on which pserver (same on every trainer)."""

    def __init__(self, model: torch.nn.Module, num_pservers: int, block_size: int) -> None:
        self.params = dict(model.named_parameters())
        for name, p in self.params.items():
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {name}: only float32 parameters are supported")
        sizes = [(name, p.numel()) for name, p in self.params.items()]
        self.shards: list[list[Block]] = partition(sizes, num_pservers, block_size)

    def values(self, shard: int) -> list[pb.Tensor]:
        return [
            tensors.encode(b.id, self._flat(b.param).detach()[b.start : b.stop].numpy())
            for b in self.shards[shard]
        ]

    def grads(self, shard: int) -> tuple[list[pb.Tensor], float]:
        """The shard's gradient blocks and their squared L2 norm (for the pserver's
        noise-scale estimate when the job adapts its batch; inf/nan: a non-finite step)."""
        out, sqnorm = [], 0.0
        for b in self.shards[shard]:
            grad = self.params[b.param].grad
            flat = (
                np.zeros(b.size, dtype=np.float32)
                if grad is None
                else grad.detach().reshape(-1)[b.start : b.stop].numpy()
            )
            sqnorm += float(np.dot(flat, flat))
            out.append(tensors.encode(b.id, flat))
        return out, sqnorm

    def load(self, shard: int, reply: pb.ParamsReply) -> None:
        """Copy the returned blocks into the model.

        With numpy, not `Tensor.copy_`: torch parallelises a multi-megabyte
        copy over its intra-op threads, and on a busy 2-core machine waiting
        for the second thread made each 4 MB copy cost ~8 ms instead of 0.1 ms.
        """
        by_id = {t.id: t for t in reply.params}
        for b in self.shards[shard]:
            t = by_id.get(b.id)
            if t is None:
                raise ValueError(f"pserver {shard} did not return block {b.id}")
            values = tensors.decode(t)
            if values.size != b.size:
                raise ValueError(f"pserver {shard}: block {b.id} has {values.size} values")
            np.copyto(self._flat(b.param)[b.start : b.stop].numpy(), values)

    def _flat(self, name: str) -> torch.Tensor:
        return self.params[name].data.view(-1)


class Job:
    """One trainer's membership in an elastic job."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: OptimizerConfig,
        resolver: Resolver,
        config: RuntimeConfig,
        block_size: int = DEFAULT_BLOCK_SIZE,
        handle_sigterm: bool = True,
        pipeline: bool = True,
    ) -> None:
        make_optimizer(optimizer)  # validate early, with the field named
        tune_malloc()
        self.compute_threads = compute_threads(config.trainer_threads, os.cpu_count())
        torch.set_num_threads(self.compute_threads)
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.name = config.member_name
        self.resolver = resolver
        self.layout = ParameterLayout(model, config.pservers, block_size)
        self.master = master_client(resolver)
        self.pservers = [pserver_client(resolver, i) for i in range(config.pservers)]
        self._pool = ThreadPoolExecutor(max_workers=config.pservers, thread_name_prefix="push")
        self.pipeline = pipeline
        self._inflight: list[Future[pb.ParamsReply]] = []
        self._task: pb.Task | None = None
        self._stop = threading.Event()
        self._terminating = threading.Lock()
        self._leaving = False
        self.steps = 0
        self.skipped_steps = 0  # non-finite gradients not pushed (a job adapting its batch)
        self._batch_samples = 0  # the size of the last batch `batches` yielded
        self.batch_size = 0  # the current task's per-trainer batch (0: before the first)
        self.last_loss: float = math.nan
        self._task_loss: list[float] = []
        self._task_compute = 0.0  # seconds of this task's steps spent computing
        self._computing_since: float | None = None  # when the current batch was handed out
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self._beater = threading.Thread(target=self._beat, name="edl-beat", daemon=True)
        self._beater.start()
        self._pull_all(init=True)
        freeze_startup_heap()  # torch, the model and the data live until exit

    # ---- the user's loop ----
    def batches(
        self,
        dataset: Any,
        batch_size: int = 32,
        chunk_size: int | None = None,
        chunks_per_task: int = 4,
        shuffle: bool = True,
    ) -> Iterator[Any]:
        """Yield batches from the master's tasks until every pass is done: of
        ``batch_size`` samples, or in a job adapting its batch (``spec.batch``) of the
        per-trainer batch the master gives each task (`job.batch_size`), which follows
        the job's batch at task boundaries (`edl.runtime.master.batch`)."""
        n = len(dataset)
        chunk_size = chunk_size or max(batch_size, 1)
        request = pb.Dataset(num_samples=n, chunk_size=chunk_size, chunks_per_task=chunks_per_task)
        self.master.call("SetDataset", request)
        while True:
            reply = self.master.call("GetTask", pb.TaskRequest(trainer=self.name))
            if reply.status == pb.TaskReply.DONE:
                return
            if reply.status == pb.TaskReply.NO_DATASET:  # a fresh master with no state yet
                self.master.call("SetDataset", request)
                continue
            if reply.status == pb.TaskReply.WAIT:
                self._stop.wait(0.2)
                continue
            task = reply.task
            self._task, self._task_loss, self._task_compute = task, [], 0.0
            order = np.arange(task.begin, task.end)
            if shuffle:
                rng = np.random.default_rng(task.id * 1_000_003 + getattr(task, "pass"))
                rng.shuffle(order)
            # a job adapting its batch: the master's per-trainer batch for this task
            self.batch_size = size = int(task.batch_size) or batch_size
            try:
                for start in range(0, len(order), size):
                    indices = order[start : start + size]
                    self._batch_samples = len(indices)
                    self._computing_since = time.perf_counter()
                    yield _collate(dataset, indices)
            except GeneratorExit:
                self._give_back()
                raise
            except Exception as error:
                self._report("FailTask", task, error=f"{type(error).__name__}: {error}")
                self._task = None
                raise
            self.flush()  # every update of this task is applied before it counts as done
            loss = float(np.mean(self._task_loss)) if self._task_loss else math.nan
            self._report("FinishTask", task, samples=task.end - task.begin, loss=loss,
                         batch_size=int(task.batch_size), compute_seconds=self._task_compute)
            self._task = None

    def step(self, loss: torch.Tensor, samples: int | None = None) -> None:
        """Backpropagate `loss`, push gradients, load the pservers' updated parameters.

        Pipelined: this step's gradients are copied out and sent in the
        background while the caller computes the next batch; the parameters
        they bring back are loaded at the next step (one step of staleness,
        as asynchronous SGD has anyway). `pipeline=False` waits instead.
        ``samples``: the samples the loss averages over (default: the size of the
        last batch `batches` yielded); a job adapting its batch (``spec.batch``) sums
        pushes into updates of its batch by them, and skips a step whose gradient
        is not finite rather than push it.
        """
        self.model.zero_grad(set_to_none=True)
        loss.backward()
        if self._computing_since is not None:  # batch, forward, backward: the compute
            self._task_compute += time.perf_counter() - self._computing_since
            self._computing_since = None
        self.last_loss = float(loss.detach())
        self._task_loss.append(self.last_loss)
        size = self._batch_samples if samples is None else int(samples)
        parts = [self.layout.grads(i) for i in range(len(self.pservers))]
        if self.config.batch_initial > 0 and not math.isfinite(sum(n for _, n in parts)):
            self.skipped_steps += 1
            log.warning("step %d: gradient not finite, skipped (%d so far)",
                        self.steps, self.skipped_steps)
            return
        requests = [
            pb.PushRequest(grads=grads, pull=True, samples=size, grad_sqnorm=sqnorm)
            for grads, sqnorm in parts
        ]
        self.flush()
        self._inflight = [
            self._pool.submit(self._push, i, request) for i, request in enumerate(requests)
        ]
        if not self.pipeline:
            self.flush()
        self.steps += 1

    def flush(self) -> None:
        """Wait for the pushes in flight and load the parameters they returned."""
        inflight, self._inflight = self._inflight, []
        for shard, future in enumerate(inflight):
            self.layout.load(shard, future.result())

    def report(self, **metrics: float) -> None:
        """Publish metrics (e.g. accuracy) in the master's progress."""
        values = {k: float(v) for k, v in metrics.items()}
        self.master.call("Report", pb.Metrics(trainer=self.name, values=values))

    def sync(self) -> None:
        """Load the current parameters from every pserver (e.g. before evaluating)."""
        self.flush()
        self._pull_all(init=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.flush()
        self._stop.set()
        for client in [self.master, *self.pservers]:
            client.stopping.set()
            client.close()
        self._pool.shutdown(wait=False)
        stop_discovery = getattr(self.resolver, "stop", None)
        if stop_discovery is not None:
            stop_discovery()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ----
    def _push(self, shard: int, request: pb.PushRequest) -> pb.ParamsReply:
        client = self.pservers[shard]
        while True:
            reply = client.call("Push", request)
            if reply.initialized:
                return reply
            self._init_shard(shard, client)

    def _init_shard(self, shard: int, client: Reconnecting) -> None:
        """A shard with no state (a pserver lost before its first checkpoint):
        offer ours; the first trainer's offer wins."""
        request = pb.InitRequest(
            params=self.layout.values(shard), optimizer=optimizer_to_proto(self.optimizer)
        )
        accepted = client.call("Init", request).accepted
        if accepted:
            log.info("initialised pserver %d", shard)

    def _pull_all(self, init: bool) -> None:
        def pull(shard: int) -> None:
            client = self.pservers[shard]
            while True:
                reply = client.call("Pull", pb.PullRequest())
                if reply.initialized:
                    self.layout.load(shard, reply)
                    return
                self._init_shard(shard, client)

        for f in [self._pool.submit(pull, i) for i in range(len(self.pservers))]:
            f.result()

    def _report(self, method: str, task: pb.Task, **fields: Any) -> bool:
        report = pb.TaskReport(trainer=self.name, id=task.id, epoch=task.epoch, **fields)
        return bool(self.master.call(method, report).accepted)

    def _give_back(self, timeout: float = 1.0) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(Exception):
            report = pb.TaskReport(trainer=self.name, id=task.id, epoch=task.epoch)
            self.master.call("ReturnTask", report, timeout=timeout, deadline=timeout)

    def _beat(self) -> None:
        while not self._stop.wait(1.0) and not self._leaving:
            with contextlib.suppress(Exception):
                self.master.call("Beat", pb.Heartbeat(trainer=self.name), timeout=2.0, deadline=2.0)

    def _leave(self, timeout: float) -> bool:
        """Tell the master this trainer is gone, so it requeues what it has it holding.

        By name, not by task: SIGTERM's handler runs between bytecodes, often just
        after a GetTask reply arrived and before `_task` names it."""
        self._task = None
        self._leaving = True  # no heartbeat after the goodbye
        try:
            self.master.call("Leave", pb.Heartbeat(trainer=self.name), timeout=timeout,
                             deadline=timeout)  # fmt: skip
        except Exception:  # leaving anyway: the trainer TTL requeues the task
            return False
        return True

    def _on_sigterm(self, signum: int, frame: object) -> None:
        """Scale-down: hand the task back and leave within 2 s."""
        if not self._terminating.acquire(blocking=False):
            return
        threading.Timer(1.8, lambda: os._exit(SIGTERM_EXIT)).start()  # hard stop, whatever happens
        if self._leave(timeout=1.0):
            said = "task handed back"
        else:
            said = "master unreachable, its trainer TTL requeues the task"
        print(f"edl trainer {self.name}: SIGTERM, {said}, exiting", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(SIGTERM_EXIT)


OUTSIDE_EDL = (
    "edl: this script is a trainer of an edl job and finds its job through the EDL_* "
    "environment, which is not set: run it with `edl run JOB.yaml` (the TrainingJob whose "
    "trainer entrypoint it is), or on Kubernetes as a TrainingJob"
)


def _under_edl(env: Any) -> bool:
    """Whether edl started this process (it always sets the job and etcd variables)."""
    return bool(env.get("EDL_JOB_NAME") or env.get("EDL_ETCD_ENDPOINTS"))


def _collate(dataset: Any, indices: np.ndarray) -> Any:
    """Index a TensorDataset (or a tuple of tensors) at once; else stack items."""
    idx = torch.from_numpy(indices)
    if hasattr(dataset, "tensors"):
        return tuple(t[idx] for t in dataset.tensors)
    if isinstance(dataset, torch.Tensor):
        return dataset[idx]
    items: list[Any] = [dataset[int(i)] for i in indices]
    return torch.utils.data.default_collate(items)


def connect(
    model: torch.nn.Module,
    optimizer: str | OptimizerConfig = "sgd",
    *,
    lr: float = 0.01,
    resolver: Resolver | None = None,
    config: RuntimeConfig | None = None,
    pipeline: bool = True,
    **optimizer_options: float,
) -> Job:
    """Join the job described by the EDL_* environment with this model.

    Run outside edl (no ``EDL_*`` environment: ``python train.py``), the script ends
    with one line saying how to run it, not a connection error's traceback.
    """
    if config is None and resolver is None and not _under_edl(os.environ):
        raise SystemExit(OUTSIDE_EDL)
    config = config or from_env()
    if isinstance(optimizer, str):
        optimizer = OptimizerConfig(name=optimizer, lr=lr, **optimizer_options)
    if resolver is None:
        from edl.runtime.coordination import EtcdResolver

        resolver = EtcdResolver.start(config)
    return Job(model, optimizer, resolver, config, pipeline=pipeline)
