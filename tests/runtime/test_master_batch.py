"""A batch-adapting PS job's master hands each task the per-trainer batch (issue 32): the
job's total batch, as its pservers sum it, over the live trainers, taken at the next task
(no restart); trainers' reports of the batch they trained at are counted."""

from __future__ import annotations

import asyncio

import pytest

from edl.runtime.master.batch import TrainerBatch
from edl.runtime.master.queue import TaskQueue
from edl.runtime.master.server import MasterService
from edl.runtime.proto import runtime_pb2 as pb


class Store:
    """The master's store with the pservers' combined figures it would read."""

    def __init__(self) -> None:
        self.figures: dict | None = None
        self.published: list[dict] = []

    async def load(self):  # pragma: no cover - not used here
        return None, []

    async def save(self, meta: dict | None, records: list[dict]) -> None:
        return None

    async def publish_progress(self, progress: dict) -> dict | None:
        self.published.append({**progress, **(self.figures or {})})
        return self.figures


def master(initial: int, samples: int = 4096, span: int = 128) -> tuple[MasterService, Store]:
    store = Store()
    queue = TaskQueue(passes=2)
    queue.set_dataset(samples, span // 4, 4)
    clock = [0.0]
    service = MasterService(queue, store, on_lost=lambda: None, clock=lambda: clock[0],
                            batch=TrainerBatch(initial))
    return service, store


def task_for(service: MasterService, trainer: str) -> pb.Task:
    reply = asyncio.run(service.GetTask(pb.TaskRequest(trainer=trainer), None))
    assert reply.status == pb.TaskReply.TASK
    return reply.task


def finish(service: MasterService, trainer: str, task: pb.Task, batch: int) -> bool:
    report = pb.TaskReport(trainer=trainer, id=task.id, epoch=task.epoch,
                           samples=task.end - task.begin, batch_size=batch)
    return asyncio.run(service.FinishTask(report, None)).accepted


def publish_once(service: MasterService) -> None:
    """One housekeeping round: publish the progress, follow the pservers' batch."""
    async def once() -> None:
        keeper = asyncio.create_task(service.housekeeping(interval=0.001, publish_every=0.0))
        await asyncio.sleep(0.02)
        service.serving = False
        await keeper
    asyncio.run(once())
    service.serving = True


def test_each_task_carries_the_job_batch_over_the_live_trainers() -> None:
    service, store = master(initial=64)
    first = task_for(service, "a")
    assert first.batch_size == 64  # one trainer: the whole initial batch
    assert finish(service, "a", first, first.batch_size)
    task_for(service, "b")
    assert task_for(service, "a").batch_size == 32  # two live trainers share 64
    store.figures = {"batch": 192.0, "initial_batch": 64}  # the Autoscaler chose 192
    publish_once(service)
    b = task_for(service, "b")
    assert b.batch_size == 96  # taken at the next task: no restart
    task_for(service, "c")
    assert task_for(service, "b").batch_size == 64  # ⌈192 / 3⌉
    service.queue.forget_trainer("c", 0.0)
    assert task_for(service, "a").batch_size == 96
    progress = service.progress(0.0)
    assert progress["trainer_batch"] == 96
    assert progress["trainer_batches"] == {"64": 1}
    assert store.published and store.published[-1]["trainer_batches"] == {"64": 1}


def test_the_batch_is_cut_at_the_task_and_a_job_without_spec_batch_gets_none() -> None:
    service, store = master(initial=64, span=40)
    store.figures = {"batch": 512, "initial_batch": 64}
    publish_once(service)
    assert task_for(service, "a").batch_size == 40  # a batch does not span tasks
    plain, store = master(initial=0)
    store.figures = {"batch": 512}
    publish_once(plain)
    task = task_for(plain, "a")
    assert task.batch_size == 0  # the script's own batch_size
    assert finish(plain, "a", task, 0)
    assert "trainer_batch" not in plain.progress(0.0)


@pytest.mark.parametrize("figures", [{}, {"batch": 0}, {"batch": float("nan")},
                                     {"batch": True}, {"batch": "96"}])
def test_unusable_pserver_figures_leave_the_batch_alone(figures: dict) -> None:
    batch = TrainerBatch(64)
    batch.follow(figures)
    assert batch.total == 64


def test_the_trainers_compute_seconds_give_the_compute_rate() -> None:
    """Goodput's batch model needs one trainer's samples/s computing alone: without it a
    curve measured at one trainer count shows no overhead for a larger batch to amortise."""
    service, _ = master(initial=64)
    assert "compute_rate" not in service.progress(0.0)
    first = task_for(service, "a")
    report = pb.TaskReport(trainer="a", id=first.id, epoch=first.epoch, samples=128,
                           batch_size=64, compute_seconds=0.5)
    assert asyncio.run(service.FinishTask(report, None)).accepted
    second = task_for(service, "a")
    assert finish(service, "a", second, 64)  # no compute seconds: not counted
    assert service.progress(0.0)["compute_rate"] == pytest.approx(256.0)
    stale = pb.TaskReport(trainer="a", id=first.id, epoch=first.epoch, samples=128,
                          batch_size=64, compute_seconds=0.01)
    assert not asyncio.run(service.FinishTask(stale, None)).accepted  # a fenced-off report
    assert service.progress(0.0)["compute_rate"] == pytest.approx(256.0)


def test_the_observation_carries_the_compute_rate() -> None:
    from edl.throughput.progress import observation_from_progress

    progress = {"contributing": 2, "samples_per_s": 900.0, "batch": 96,
                "compute_rate": 1500.0}
    observation = observation_from_progress(progress, 1.0)
    assert observation is not None and observation.compute_rate == 1500.0
    bad = observation_from_progress({**progress, "compute_rate": -3}, 1.0)
    assert bad is not None and bad.compute_rate is None
