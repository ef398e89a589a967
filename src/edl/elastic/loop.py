"""`ElasticLoop`: data-parallel training whose world changes between two steps.

The script builds its model, optimizer and data first (a new worker is warm before
it asks to join), wraps them in a `State`, and hands one step's work to `run`. At
every step boundary the world agrees, in one small all-reduce, whether workers are
waiting to join or asking to leave; if so it re-forms in the living processes: a
new generation in the job's store, a fresh process group, the state copied from
the most advanced worker, DDP wrapped again. The sampler's cursor is part of the
state, so what is left of the epoch is partitioned over the new world and nothing
is skipped or trained twice.

* A leaver (SIGTERM: a shrink's drain) finishes its step, is left out of the next
  generation at the boundary, and returns from `run`; nobody waits for it.
* A dead worker (SIGKILL) breaks a collective: the survivors re-form without it
  once it has not arrived within ``arrive_timeout_s`` (at once when its agent has
  reported it gone). A step whose collective failed has not touched the model or
  the optimizer (the failure raises in backward, before `optimizer.step`), so the
  state is committed at every step for free and at most the step in flight is lost.

Without ``EDL_LIVE_STORE`` (plain ``torchrun``, or one process) the world is fixed.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from edl.elastic import group
from edl.elastic.contract import Batch, BatchControl, LiveConfig, live_config
from edl.elastic.membership import Membership, Plan, admissible, next_plan
from edl.elastic.sampler import epoch_order, shares
from edl.elastic.state import State

__all__ = ["Batch", "ElasticLoop", "LiveConfig", "live_config"]

MAX_FAILED_FORMATIONS = 20


class _Left(Exception):
    """This worker left the world (drained) or the job finished while it waited."""


class ElasticLoop:
    """Epochs of steps over a dataset of ``dataset_size`` samples, ``batch_size`` per worker.

    With ``adaptive`` (`BatchControl`: `AdaptiveBatch`) the batch is its total batch,
    split over the world, and a batch chosen for the job while it trains takes effect
    at the next step boundary in every worker at once, mid-epoch, without a restart or
    a re-formation: the sampler's cursor counts samples, so the rest of the epoch is
    cut into steps of the new size."""

    def __init__(
        self,
        state: State,
        dataset_size: int,
        batch_size: int,
        epochs: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        audit: str | None = None,
        env: Mapping[str, str] | None = None,
        adaptive: BatchControl | None = None,
    ) -> None:
        self.state = state
        self.size, self.batch, self.epochs = dataset_size, batch_size, epochs
        self.seed, self.shuffle = seed, shuffle
        self.adaptive = adaptive
        # the audit file: appended to with O_APPEND (one write per line, whole lines even
        # from many processes, kept by the kernel when the writer is SIGKILLed next)
        self._audit_fd = (os.open(audit, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                          if audit else None)
        self.config = live_config(os.environ if env is None else env)
        self.ddp: torch.nn.Module = state.model
        self.rank, self.world, self.gen = 0, 1, -1
        self.plan: Plan | None = None
        self.leaving = False
        self.formations = 0
        self._order: tuple[int, list[int]] = (-1, [])
        self._store: Any = None
        self._members: Membership | None = None
        self._beat_at = 0.0
        self._first_step_pending = False
        self._tried_gen = -1
        self._stepped_at: float | None = None  # monotonic end of this worker's last step
        self.resizes = 0  # re-formations this worker measured (as rank 0)

    # -- the public loop --------------------------------------------------------------
    def run(
        self,
        train_step: Callable[[Batch], Any],
        end_of_epoch: Callable[[int], None] | None = None,
    ) -> bool:
        """Train to the last epoch; False when this worker left before the end (drained)."""
        previous = signal.signal(signal.SIGTERM, self._drain)
        try:
            self._start()
            while self.state.progress.epoch < self.epochs:
                try:
                    self._steps(train_step, end_of_epoch)
                except _Left:
                    return False
                except Exception as error:
                    if self.config is None or not group.is_comm_failure(error):
                        raise
                    self._log(f"collective failed in generation {self.gen}: {_short(error)}")
                    self._reform_after_failure()
            self._finish()
            return True
        except _Left:
            return False
        finally:
            self.ddp = self.state.model
            group.leave_group()
            signal.signal(signal.SIGTERM, previous)
            self._debug("left the group")
            self._members = None
            self._store = None
            gc.collect()
            self._debug("collected")

    # -- starting ---------------------------------------------------------------------
    def _start(self) -> None:
        if self.config is None:
            self._start_fixed()
            return
        from torch.distributed import TCPStore

        faulthandler.register(signal.SIGUSR1)  # `kill -USR1` prints where a worker is
        host, _, port = self.config.store.rpartition(":")
        self._store = TCPStore(host, int(port), is_master=False,
                               timeout=timedelta(seconds=self.config.group_timeout_s))
        self._members = Membership(self._store, self.config.prefix, self.config.ident)
        self._join_as_new()

    def _start_fixed(self) -> None:
        """A fixed world: torchrun's variables, or a single process."""
        if not dist.is_initialized():
            if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
                dist.init_process_group(group.backend())
            else:
                dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        self.rank, self.world, self.gen = dist.get_rank(), dist.get_world_size(), 0
        self._wrap()

    def _join_as_new(self) -> None:
        """Queue as a warm joiner; wait to be admitted (or found the first world)."""
        assert self._members is not None and self.config is not None
        members = self._members
        slot = members.register()
        self._log(f"waiting to join (slot {slot}) time={time.time():.3f}")
        enough_since: float | None = None
        waiting_since = time.monotonic()
        while True:
            if self.leaving or self._store.check([members._k("done")]):
                raise _Left()
            gen = members.admitted(slot)
            if gen is not None:
                try:
                    if self._form(members.plan(gen)):
                        return
                except Exception as error:
                    if not group.is_comm_failure(error) or self.plan is None:
                        raise
                    self._log(f"forming generation {gen} failed: {_short(error)}")
                    self._reform_after_failure()
                    return
                slot = members.register()
                waiting_since = time.monotonic()
                continue
            if not members.has_plan(0):
                seen = members.joiners_seen()
                if seen >= self.config.min_world:
                    enough_since = enough_since or time.monotonic()
                    if (seen >= self.config.max_world
                            or time.monotonic() - enough_since >= self.config.last_call_s):
                        count = admissible(0, seen, self.config.world_sizes)
                        found = members.joiner_idents(0, count)
                        members.propose(Plan(0, tuple(i for _, i in found), count,
                                             tuple(s for s, _ in found)))
            elif time.monotonic() - waiting_since > self.config.orphan_s:
                self._adopt_orphaned_job(slot)
                waiting_since = time.monotonic()
            time.sleep(0.01)

    def _adopt_orphaned_job(self, slot: int) -> None:
        """Every member is gone (no heartbeat for ``orphan_s``): the waiting joiners found
        a new generation; the state is what they built (their checkpoint, if any)."""
        assert self._members is not None and self.config is not None
        beat = self._members.last_beat()
        if beat is not None and time.time() - beat < self.config.orphan_s:
            return
        latest = self._members.latest() or 0
        upto = self._members.plan(latest).joiners_upto
        seen = self._members.joiners_seen()
        found = self._members.joiner_idents(upto, seen)
        self._log(f"no heartbeat from generation {latest}: founding a new one")
        self._members.beat()
        self._members.propose(Plan(latest + 1, tuple(i for _, i in found), seen,
                                   tuple(s for s, _ in found)))

    # -- forming a generation ---------------------------------------------------------
    def _form(self, plan: Plan) -> bool:
        """Arrive for ``plan``; True when this worker is in its world (group and state
        ready), False when it was left out (it then queues again as a joiner)."""
        assert self._members is not None and self.config is not None
        started = time.time()
        self._tried_gen = max(self._tried_gen, plan.gen)
        self.ddp = self.state.model  # the old wrapper (and its hooks) goes with the old group
        group.leave_group()
        step = self.state.progress.step if self.formations else -1  # -1: never had a world
        verdict = self._members.arrive(plan, step, self.config.arrive_timeout_s)
        idents = [a.ident for a in verdict]
        if self.config.ident not in idents:
            self._log(f"left out of generation {plan.gen}")
            return False
        self.plan = Plan(plan.gen, tuple(idents), plan.joiners_upto)
        self.rank, self.world, self.gen = idents.index(self.config.ident), len(idents), plan.gen
        group.join_group(self._store, f"{self.config.prefix}/pg/{plan.gen}/", self.rank,
                         self.world, self.config.group_timeout_s)
        steps = {a.step for a in verdict}
        copied = len(steps) > 1 or min(steps) < 0  # identical replicas need no copy
        if copied:
            tree = group.broadcast_tree(self.state.tree(), self._store,
                                        f"{self.config.prefix}/state/{plan.gen}")
            if self.rank != 0:
                self.state.load(tree)
        self._wrap()
        self.formations += 1
        self._first_step_pending = True
        if self.rank == 0:
            self._members.beat()
            p = self.state.progress
            line = (f"formed gen={plan.gen} world={self.world} step={p.step} epoch={p.epoch} "
                    f"consumed={p.consumed} copied={int(copied)} "
                    f"seconds={time.time() - started:.3f} time={time.time():.3f}")
            self._log(line)
            self._audit(line)
        return True

    def _reform_after_failure(self) -> None:
        """The same members, next generation: whoever arrives in time is the world."""
        assert self._members is not None and self.plan is not None
        for _ in range(MAX_FAILED_FORMATIONS):
            gen = max(self.plan.gen, self._tried_gen) + 1  # never a generation tried before
            try:
                plan = self._members.propose(
                    Plan(gen, self.plan.members, self.plan.joiners_upto))
                if not self._form(plan):
                    self._join_as_new()
                return
            except _Left:
                raise
            except Exception as error:
                if not group.is_comm_failure(error):
                    raise
                self._log(f"forming generation {gen} failed: {_short(error)}")
        raise RuntimeError(f"edl.elastic: no world formed after {MAX_FAILED_FORMATIONS} tries")

    def _wrap(self) -> None:
        model = self.state.model
        if self.world > 1 or self.config is not None:
            self.ddp = DistributedDataParallel(model, init_sync=False)
        else:
            self.ddp = model
        if self.adaptive is not None:  # its hook on the new wrapper; rank 0's batch agreed
            self.adaptive.attach(self.ddp)

    # -- training ---------------------------------------------------------------------
    def _steps(
        self, train_step: Callable[[Batch], Any], end_of_epoch: Callable[[int], None] | None
    ) -> None:
        """Steps until the epochs are done or the world must change (then re-formed)."""
        progress = self.state.progress
        while progress.epoch < self.epochs:
            parts = shares(progress.consumed, self.size, self.world, self.local_batch)
            mine = parts[self.rank]
            order = self._epoch_order(progress.epoch)
            step_total = sum(len(p) for p in parts)
            # before the step: a worker killed in it has still said so
            self._audit(f"trained gen={self.gen} step={progress.step} epoch={progress.epoch} "
                        f"rank={self.rank} world={self.world} from={mine.start} to={mine.stop}")
            if self._first_step_pending:
                self._report_pause()
            train_step(Batch([order[i] for i in range(mine.start, mine.stop)], progress.epoch,
                             progress.step, step_total, self.world))
            self._done_step()
            self._stepped_at = time.monotonic()
            progress.step += 1
            progress.consumed += step_total
            if progress.consumed >= self.size:
                if end_of_epoch is not None:
                    end_of_epoch(progress.epoch)
                progress.epoch += 1
                progress.consumed = 0
            if self._boundary():
                return

    @property
    def local_batch(self) -> int:
        """This worker's samples per step (the adaptive total's share, if any)."""
        return self.adaptive.local_batch_size() if self.adaptive is not None else self.batch

    def _report_pause(self) -> None:
        """Rank 0 of a re-formed world prints the pause since its last step (a failed
        step in flight included: it is redone) as a metrics line, which its agent
        publishes for the Autoscaler (`edl.throughput.pause`)."""
        if self.rank != 0 or self._stepped_at is None or self.formations < 2:
            return
        self.resizes += 1
        pause = time.monotonic() - self._stepped_at
        print(f"resizes={self.resizes} resize_pause_s={pause:.3f}", flush=True)

    def _done_step(self) -> None:
        if self._first_step_pending and self.rank == 0:
            line = f"first-step gen={self.gen} time={time.time():.3f}"
            self._log(line)
            self._audit(line)
        self._first_step_pending = False

    def _boundary(self) -> bool:
        """Agree on a change at this step boundary; True when the world was re-formed."""
        if self._members is None or self.plan is None or self.config is None:
            if self.leaving:
                raise _Left()
            return False
        flags = torch.zeros(self.world + 2, dtype=torch.int64)  # joiners, leavers, batch
        if self.rank == 0:
            flags[0] = self._members.joiners_seen()
            if self.adaptive is not None:
                flags[-1] = self.adaptive.published() or 0
            now = time.monotonic()
            if now - self._beat_at >= 1.0:
                self._members.beat()
                self._beat_at = now
        flags[1 + self.rank] = int(self.leaving)
        dist.all_reduce(flags)
        self._change_batch(int(flags[-1]))
        seen = int(flags[0])
        leaving = [self.plan.members[r] for r in range(self.world) if flags[1 + r]]
        if seen <= self.plan.joiners_upto and not leaving:
            return False
        if self.state.progress.epoch >= self.epochs:
            return False  # finished: joiners are told by `_finish`, leavers end anyway
        upto = self.plan.joiners_upto
        if not leaving:  # only joiners: as many as give an allowed world size, or none yet
            seen = upto + admissible(self.world, seen - upto, self.config.world_sizes)
            if seen == upto:
                return False
        joiners = self._members.joiner_idents(upto, seen)
        plan = next_plan(self.plan, leaving, joiners, seen)
        if self.leaving or not plan.members:
            self._log(f"leaving at step {self.state.progress.step}")
            raise _Left()  # the survivors propose the next generation without this worker
        held = self._members.propose(plan)
        if not self._form(held):
            self._join_as_new()
        return True

    def _change_batch(self, chosen: int) -> None:
        """Every worker takes rank 0's newly published batch (0: none) before the next step."""
        if self.adaptive is None or chosen < 1 or chosen == self.adaptive.batch:
            return
        before = self.adaptive.batch
        self.adaptive.set_batch(chosen)
        if self.rank == 0:
            p = self.state.progress
            line = (f"batch gen={self.gen} step={p.step} epoch={p.epoch} consumed={p.consumed} "
                    f"from={before} to={self.adaptive.batch} time={time.time():.3f}")
            self._log(line)
            self._audit(line)

    def _finish(self) -> None:
        if self._store is not None and self.rank == 0 and self.config is not None:
            self._store.set(f"{self.config.prefix}/done", "1")

    # -- helpers ----------------------------------------------------------------------
    def _epoch_order(self, epoch: int) -> list[int]:
        if self._order[0] != epoch:
            self._order = (epoch, epoch_order(self.size, epoch, self.seed, self.shuffle))
        return self._order[1]

    def _drain(self, signum: int, frame: object) -> None:
        self.leaving = True

    def _audit(self, line: str) -> None:
        if self._audit_fd is not None:
            os.write(self._audit_fd, f"edl-elastic [{self._who()}] {line}\n".encode())

    def _who(self) -> str:
        return self.config.ident if self.config is not None else f"rank {self.rank}"

    def _debug(self, message: str) -> None:
        if os.environ.get("EDL_ELASTIC_DEBUG"):
            self._log(f"{message} time={time.time():.3f}")

    def _log(self, message: str) -> None:
        print(f"edl-elastic [{self._who()}] {message}", file=sys.stderr, flush=True)


def _short(error: BaseException) -> str:
    return str(error).strip().splitlines()[0][:200] if str(error).strip() else repr(error)
