"""The master's task queue: pure accounting over plain data, no I/O.

The dataset is a range of sample indices cut into chunks; a task is a few
chunks. Tasks move todo -> pending -> done (or back to todo, or to failed).
Every dispatch bumps the task's epoch and the trainer must quote it when it
reports, so a report from an older dispatch (a trainer that timed out, died
and came back, or talked to a previous master) is ignored. A pass ends when
nothing is todo or pending — after *any* transition, so a discarded last task
cannot hang the job. Time is passed in (`now`), never read, so tests and the
server shell drive it.

Every mutation records the ids it touched in `dirty` (and `meta_dirty`), which
the server persists before it answers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from enum import Enum

TODO, PENDING, DONE, FAILED = "todo", "pending", "done", "failed"


@dataclass
class TaskRecord:
    """One task; persisted as one etcd value so state never hits a size limit."""

    id: int
    begin: int
    end: int
    state: str = TODO
    epoch: int = 0
    failures: int = 0
    trainer: str = ""
    dispatches: int = 0
    finished_passes: list[int] = field(default_factory=list)
    dispatched_pass: int = -1  # the pass of the last dispatch: a second one is a re-dispatch
    redispatches: int = 0
    # trainer -> [tasks, samples] it finished of this task: persisted with the finish, so
    # per-trainer totals survive a master failover (they are summed again on restore)
    credits: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A detached plain copy (hand-written: dataclasses.asdict is 10x slower)."""
        return {
            "id": self.id, "begin": self.begin, "end": self.end, "state": self.state,
            "epoch": self.epoch, "failures": self.failures, "trainer": self.trainer,
            "dispatches": self.dispatches, "finished_passes": list(self.finished_passes),
            "dispatched_pass": self.dispatched_pass, "redispatches": self.redispatches,
            "credits": {k: list(v) for k, v in self.credits.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> TaskRecord:
        return cls(**data)


@dataclass
class QueueMeta:
    """Job-level queue state: the dataset shape and the current pass."""

    num_samples: int = 0
    chunk_size: int = 0
    chunks_per_task: int = 0
    passes: int = 1
    current_pass: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> QueueMeta:
        return cls(**data)


class Kind(Enum):
    TASK = "task"
    WAIT = "wait"
    DONE = "done"
    NO_DATASET = "no_dataset"


@dataclass(frozen=True)
class Dispatch:
    kind: Kind
    task: TaskRecord | None = None
    current_pass: int = 0


@dataclass(frozen=True)
class TimeoutPolicy:
    """Adaptive task timeout: max(floor, factor x longest recent task time)."""

    floor: float = 30.0
    factor: float = 3.0
    window: int = 50

    def timeout(self, recent: deque[float]) -> float:
        return max(self.floor, self.factor * max(recent, default=0.0))


def split_tasks(num_samples: int, chunk_size: int, chunks_per_task: int) -> list[TaskRecord]:
    """Cut [0, num_samples) into tasks of `chunk_size * chunks_per_task` samples."""
    if num_samples <= 0 or chunk_size <= 0 or chunks_per_task <= 0:
        raise ValueError("num_samples, chunk_size and chunks_per_task must be positive")
    span = chunk_size * chunks_per_task
    return [
        TaskRecord(id=i, begin=start, end=min(start + span, num_samples))
        for i, start in enumerate(range(0, num_samples, span))
    ]


@dataclass
class TrainerStats:
    """Per-trainer liveness and throughput, kept in memory only."""

    last_seen: float
    gone: bool = False
    samples: int = 0
    tasks: int = 0
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=20))

    def throughput(self) -> float:
        if len(self.recent) < 2:
            return 0.0
        span = self.recent[-1][0] - self.recent[0][0]
        samples = sum(n for _, n in list(self.recent)[1:])
        return samples / span if span > 0 else 0.0


class TaskQueue:
    """todo / pending / done / failed with passes, fencing, timeouts and liveness."""

    def __init__(
        self,
        passes: int = 1,
        failure_limit: int = 3,
        timeout: TimeoutPolicy | None = None,
        trainer_ttl: float = 5.0,
    ) -> None:
        self.meta = QueueMeta(passes=passes)
        self.failure_limit = failure_limit
        self.timeout_policy = timeout or TimeoutPolicy()
        self.trainer_ttl = trainer_ttl
        self.tasks: dict[int, TaskRecord] = {}
        self.todo: deque[int] = deque()
        self.pending_since: dict[int, float] = {}
        self.recent_durations: deque[float] = deque(maxlen=self.timeout_policy.window)
        self.trainers: dict[str, TrainerStats] = {}
        self.last_loss: float | None = None
        self.metrics: dict[str, float] = {}
        self.redispatches = 0
        self.dirty: set[int] = set()
        self.meta_dirty = False

    # ---- setup and restore ----
    def set_dataset(self, num_samples: int, chunk_size: int, chunks_per_task: int) -> bool:
        """First caller defines the dataset; later identical calls are no-ops.

        Returns False when a different dataset was already set.
        """
        m = self.meta
        if self.tasks:
            return (m.num_samples, m.chunk_size, m.chunks_per_task) == (
                num_samples,
                chunk_size,
                chunks_per_task,
            )
        tasks = split_tasks(num_samples, chunk_size, chunks_per_task)
        m.num_samples, m.chunk_size, m.chunks_per_task = num_samples, chunk_size, chunks_per_task
        self.tasks = {t.id: t for t in tasks}
        self.todo = deque(t.id for t in tasks)
        self.dirty.update(self.tasks)
        self.meta_dirty = True
        return True

    @classmethod
    def restore(
        cls, meta: QueueMeta, records: list[TaskRecord], now: float, **kwargs: object
    ) -> TaskQueue:
        """Rebuild from persisted state; pending tasks get fresh timers and their
        holders a fresh liveness window (they may still be alive and finish)."""
        # the constructor's keywords, passed through (checked where they are spelled out)
        queue = cls(passes=meta.passes, **kwargs)  # type: ignore[arg-type]
        queue.meta = meta
        queue.tasks = {r.id: r for r in sorted(records, key=lambda r: r.id)}
        queue.todo = deque(r.id for r in queue.tasks.values() if r.state == TODO)
        for r in queue.tasks.values():
            queue.redispatches += r.redispatches
            for trainer, (tasks, samples) in r.credits.items():
                stats = queue.trainers.setdefault(trainer, TrainerStats(last_seen=now, gone=True))
                stats.tasks += tasks
                stats.samples += samples
        for r in queue.tasks.values():
            if r.state == PENDING:
                queue.pending_since[r.id] = now
                queue._touch(r.trainer, now)
        queue._advance(now)
        return queue

    # ---- trainer operations ----
    def dispatch(self, trainer: str, now: float) -> Dispatch:
        self._touch(trainer, now)
        if not self.tasks:
            return Dispatch(Kind.NO_DATASET)
        if self.finished:
            return Dispatch(Kind.DONE, current_pass=self.meta.current_pass)
        # A trainer holds one task at a time: asking again means it never got, or
        # gave up, what it held (e.g. the reply was lost in a master failover).
        for held in self._held_by(trainer):
            self._requeue(held, front=True)
        if not self.todo:
            return Dispatch(Kind.WAIT, current_pass=self.meta.current_pass)
        task = self.tasks[self.todo.popleft()]
        if task.dispatched_pass == self.meta.current_pass:
            task.redispatches += 1
            self.redispatches += 1
        task.dispatched_pass = self.meta.current_pass
        task.state, task.trainer = PENDING, trainer
        task.epoch += 1
        task.dispatches += 1
        self.pending_since[task.id] = now
        self.dirty.add(task.id)
        return Dispatch(Kind.TASK, task=task, current_pass=self.meta.current_pass)

    def finish(
        self,
        task_id: int,
        epoch: int,
        trainer: str,
        now: float,
        samples: int = 0,
        loss: float | None = None,
    ) -> bool:
        """Accept a finish only from the current dispatch of a pending task."""
        self._touch(trainer, now)
        task = self._current(task_id, epoch)
        if task is None:
            return False
        started = self.pending_since.pop(task_id, now)
        self.recent_durations.append(max(0.0, now - started))
        task.state, task.trainer = DONE, ""
        task.finished_passes.append(self.meta.current_pass)
        credit = task.credits.setdefault(trainer, [0, 0])
        credit[0] += 1
        credit[1] += samples
        self.dirty.add(task_id)
        stats = self.trainers[trainer]
        stats.samples += samples
        stats.tasks += 1
        stats.recent.append((now, samples))
        if loss is not None:
            self.last_loss = loss
        self._advance(now)
        return True

    def fail(self, task_id: int, epoch: int, trainer: str, now: float) -> bool:
        """The task's own failure (an error, a timeout): counts towards the limit."""
        self._touch(trainer, now)
        task = self._current(task_id, epoch)
        if task is None:
            return False
        self._fail(task)
        self._advance(now)
        return True

    def give_back(self, task_id: int, epoch: int, trainer: str, now: float) -> bool:
        """A trainer leaving (scale-down) returns its task; not the task's fault."""
        task = self._current(task_id, epoch)
        if task is None:
            return False
        self._requeue(task, front=True)
        self._advance(now)
        return True

    def beat(self, trainer: str, now: float) -> None:
        self._touch(trainer, now)

    def forget_trainer(self, trainer: str, now: float) -> list[int]:
        """Return a lost trainer's tasks to todo at once (no failure counted)."""
        if trainer in self.trainers:
            self.trainers[trainer].gone = True
        returned = [t.id for t in self._held_by(trainer)]
        for task_id in returned:
            self._requeue(self.tasks[task_id], front=True)
        self._advance(now)
        return returned

    def reap(self, now: float) -> tuple[list[str], list[int]]:
        """Periodic check: trainers silent past the TTL lose their tasks; tasks
        pending past the adaptive timeout fail. Returns (lost trainers, timed-out ids)."""
        lost = [
            name
            for name, s in self.trainers.items()
            if not s.gone and now - s.last_seen > self.trainer_ttl
        ]
        for name in lost:
            self.forget_trainer(name, now)
        limit = self.current_timeout()
        expired = [tid for tid, since in self.pending_since.items() if now - since > limit]
        for tid in expired:
            self._fail(self.tasks[tid])
        self._advance(now)
        return lost, expired

    def record_metrics(self, trainer: str, values: dict[str, float], now: float) -> None:
        self._touch(trainer, now)
        self.metrics.update(values)

    # ---- views ----
    @property
    def finished(self) -> bool:
        return bool(self.tasks) and self.meta.current_pass >= self.meta.passes

    def current_timeout(self) -> float:
        return self.timeout_policy.timeout(self.recent_durations)

    def counts(self) -> dict[str, int]:
        out = {TODO: 0, PENDING: 0, DONE: 0, FAILED: 0}
        for t in self.tasks.values():
            out[t.state] += 1
        return out

    def progress(self, now: float) -> dict:
        """Plain JSON-able progress for `edl status` and the live display."""
        counts = self.counts()
        return {
            "pass": min(self.meta.current_pass, self.meta.passes),
            "passes": self.meta.passes,
            "finished": self.finished,
            "tasks_total": len(self.tasks),
            "tasks_done": counts[DONE],
            "tasks_todo": counts[TODO],
            "tasks_pending": counts[PENDING],
            "tasks_failed": counts[FAILED],
            "redispatches": self.redispatches,
            "timeout_s": round(self.current_timeout(), 3),
            "last_loss": self.last_loss,
            "metrics": dict(self.metrics),
            "trainers": {
                name: {
                    "samples": s.samples,
                    "tasks": s.tasks,
                    "alive": not s.gone,
                    "samples_per_s": round(s.throughput(), 2),
                    "seen_s_ago": round(now - s.last_seen, 2),
                }
                for name, s in sorted(self.trainers.items())
            },
            "trainers_alive": sum(not s.gone for s in self.trainers.values()),
            "samples_per_s": round(
                sum(s.throughput() for s in self.trainers.values() if not s.gone), 2
            ),
            # the job's throughput against the trainers that produce it (a trainer
            # counts once it has finished tasks recently): a point of its scaling curve
            "contributing": sum(
                not s.gone and s.throughput() > 0 for s in self.trainers.values()
            ),
            "remaining_samples": self._remaining_samples(counts),
        }

    def _remaining_samples(self, counts: dict[str, int]) -> int | None:
        """Samples of the tasks not done in this pass, plus every later pass."""
        if not self.tasks or self.finished:
            return 0 if self.finished else None
        sizes = [(t.end - t.begin, t.state) for t in self.tasks.values()]
        passes_after = max(0, self.meta.passes - self.meta.current_pass - 1)
        left = sum(size for size, state in sizes if state in (TODO, PENDING))
        return left + passes_after * sum(size for size, _ in sizes)

    # ---- internals ----
    def _touch(self, trainer: str, now: float) -> None:
        if not trainer:
            return
        stats = self.trainers.get(trainer)
        if stats is None:
            self.trainers[trainer] = TrainerStats(last_seen=now)
        else:
            stats.last_seen = max(stats.last_seen, now)
            stats.gone = False

    def _held_by(self, trainer: str) -> list[TaskRecord]:
        """Pending tasks of one trainer (scans only the pending ones: O(trainers))."""
        return [self.tasks[i] for i in self.pending_since if self.tasks[i].trainer == trainer]

    def _current(self, task_id: int, epoch: int) -> TaskRecord | None:
        task = self.tasks.get(task_id)
        if task is None or task.state != PENDING or task.epoch != epoch:
            return None
        return task

    def _requeue(self, task: TaskRecord, front: bool = False) -> None:
        self.pending_since.pop(task.id, None)
        task.state, task.trainer = TODO, ""
        if front:
            self.todo.appendleft(task.id)
        else:
            self.todo.append(task.id)
        self.dirty.add(task.id)

    def _fail(self, task: TaskRecord) -> None:
        task.failures += 1
        if task.failures > self.failure_limit:
            self.pending_since.pop(task.id, None)
            task.state, task.trainer = FAILED, ""
            self.dirty.add(task.id)
        else:
            self._requeue(task)

    def _advance(self, now: float) -> None:
        """End the pass when nothing is todo or pending; start the next one."""
        if not self.tasks or self.finished or self.todo or self.pending_since:
            return
        if any(t.state in (TODO, PENDING) for t in self.tasks.values()):
            return
        self.meta.current_pass += 1
        self.meta_dirty = True
        if self.finished:
            return
        for t in self.tasks.values():
            t.state, t.failures, t.trainer = TODO, 0, ""
            self.dirty.add(t.id)
        self.todo = deque(sorted(self.tasks))
