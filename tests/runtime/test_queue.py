"""The master's task queue: fencing, timeouts, liveness, passes, accounting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.runtime.master.queue import (
    DONE,
    FAILED,
    Kind,
    QueueMeta,
    TaskQueue,
    TaskRecord,
    TimeoutPolicy,
    split_tasks,
)


def make(passes: int = 1, samples: int = 100, **kw: object) -> TaskQueue:
    q = TaskQueue(passes=passes, **kw)  # type: ignore[arg-type]
    assert q.set_dataset(samples, 10, 2)
    return q


def test_split_covers_every_sample_once() -> None:
    tasks = split_tasks(105, 10, 2)
    assert [(t.begin, t.end) for t in tasks][-1] == (100, 105)
    covered = [i for t in tasks for i in range(t.begin, t.end)]
    assert covered == list(range(105))


def test_dataset_first_caller_wins() -> None:
    q = make()
    assert q.set_dataset(100, 10, 2)
    assert not q.set_dataset(200, 10, 2)
    assert len(q.tasks) == 5


def test_stale_finish_after_timeout_is_ignored() -> None:
    q = make(timeout=TimeoutPolicy(floor=5.0))
    first = q.dispatch("a", 0.0).task
    assert first is not None
    epoch1 = first.epoch
    q.beat("a", 6.0)
    _, expired = q.reap(6.0)
    assert expired == [first.id]
    # the task is dispatched again at the back of the queue; drain to it
    again = None
    for _ in range(5):
        d = q.dispatch("b", 7.0)
        assert d.task is not None
        if d.task.id == first.id:
            again = d.task
            break
        q.finish(d.task.id, d.task.epoch, "b", 7.0)
    assert again is not None and again.epoch == epoch1 + 1
    assert not q.finish(first.id, epoch1, "a", 8.0)  # late report of the old dispatch
    assert q.finish(first.id, again.epoch, "b", 8.0)
    assert q.tasks[first.id].finished_passes == [0]


def test_lost_trainer_returns_tasks_at_once_without_failure() -> None:
    q = make(trainer_ttl=2.0)
    task = q.dispatch("dead", 0.0).task
    assert task is not None
    q.beat("alive", 3.0)
    lost, expired = q.reap(3.0)
    assert lost == ["dead"] and expired == []
    assert q.tasks[task.id].failures == 0
    d = q.dispatch("alive", 3.0)
    assert d.task is not None and d.task.id == task.id  # returned to the front


def test_failures_over_limit_discard_and_pass_still_advances() -> None:
    q = make(passes=2, samples=20, failure_limit=1)  # one task
    for _ in range(2):
        t = q.dispatch("a", 0.0).task
        assert t is not None
        assert q.fail(t.id, t.epoch, "a", 0.0)
    # discarded: the pass advanced instead of hanging
    assert q.meta.current_pass == 1
    t = q.dispatch("a", 1.0).task
    assert t is not None and q.tasks[t.id].failures == 0
    assert q.finish(t.id, t.epoch, "a", 1.0)
    assert q.finished and q.dispatch("a", 2.0).kind is Kind.DONE


def test_wait_while_others_hold_the_last_tasks() -> None:
    q = make(samples=20)
    assert q.dispatch("a", 0.0).kind is Kind.TASK
    assert q.dispatch("b", 0.0).kind is Kind.WAIT


def test_adaptive_timeout_grows_with_observed_tasks() -> None:
    q = make(timeout=TimeoutPolicy(floor=1.0, factor=3.0))
    t = q.dispatch("a", 0.0).task
    assert t is not None
    q.finish(t.id, t.epoch, "a", 10.0)
    assert q.current_timeout() == 30.0


def test_give_back_is_not_a_failure() -> None:
    q = make()
    t = q.dispatch("a", 0.0).task
    assert t is not None
    assert q.give_back(t.id, t.epoch, "a", 0.1)
    assert q.tasks[t.id].failures == 0
    assert not q.give_back(t.id, t.epoch, "a", 0.2)


def test_restore_resumes_pending_with_same_epoch() -> None:
    q = make(passes=2)
    t = q.dispatch("a", 0.0).task
    assert t is not None
    records = [TaskRecord.from_dict(r.to_dict()) for r in q.tasks.values()]
    restored = TaskQueue.restore(QueueMeta.from_dict(q.meta.to_dict()), records, now=50.0)
    # the trainer that held it before the failover can still finish it
    assert restored.finish(t.id, t.epoch, "a", 51.0)
    assert restored.tasks[t.id].state == DONE


ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "finish", "stale", "fail", "give", "reap", "restore"]),
        st.integers(0, 3),  # trainer
        st.floats(0.0, 3.0),  # time step
    ),
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 3))
def test_every_task_finishes_at_most_once_per_pass(script: list, passes: int) -> None:
    q = make(
        passes=passes,
        samples=60,
        failure_limit=2,
        timeout=TimeoutPolicy(floor=4.0),
        trainer_ttl=3.0,
    )
    held: dict[str, tuple[int, int]] = {}
    now = 0.0
    for op, who, dt in script:
        now += dt
        name = f"t{who}"
        if op == "get" and name not in held:
            d = q.dispatch(name, now)
            if d.task:
                held[name] = (d.task.id, d.task.epoch)
        elif op in ("finish", "fail", "give") and name in held:
            tid, ep = held.pop(name)
            getattr(q, {"finish": "finish", "fail": "fail", "give": "give_back"}[op])(
                tid, ep, name, now
            )
        elif op == "stale" and name in held:
            tid, ep = held[name]
            assert not q.finish(tid, ep - 1, name, now)
        elif op == "reap":
            q.reap(now)
        elif op == "restore":
            q = TaskQueue.restore(
                QueueMeta.from_dict(q.meta.to_dict()),
                [TaskRecord.from_dict(r.to_dict()) for r in q.tasks.values()],
                now,
                failure_limit=2,
                timeout=TimeoutPolicy(floor=4.0),
                trainer_ttl=3.0,
            )
        for t in q.tasks.values():
            assert len(t.finished_passes) == len(set(t.finished_passes))
            assert all(p <= q.meta.current_pass for p in t.finished_passes)
        if not q.finished:
            open_ = [t for t in q.tasks.values() if t.state not in (DONE, FAILED)]
            assert open_, "a pass with nothing open must have advanced"
    # drive to the end with one healthy trainer: the job always completes
    for _ in range(10_000):
        now += 0.01
        d = q.dispatch("finisher", now)
        if d.kind is Kind.DONE:
            break
        if d.task:
            q.finish(d.task.id, d.task.epoch, "finisher", now)
        else:
            now += 10.0
            q.beat("finisher", now)
            q.reap(now)
    assert q.finished


def test_progress_reports_trainers_and_departures() -> None:
    q = make(trainer_ttl=2.0)
    t = q.dispatch("a", 0.0).task
    assert t is not None
    q.finish(t.id, t.epoch, "a", 1.0, samples=20, loss=0.5)
    q.beat("b", 1.0)
    q.beat("a", 4.0)
    q.reap(4.0)  # b silent for 3 s > ttl
    p = q.progress(4.0)
    assert p["tasks_done"] == 1 and p["tasks_total"] == 5 and p["last_loss"] == 0.5
    assert p["trainers"]["a"]["alive"] and not p["trainers"]["b"]["alive"]
    assert p["trainers_alive"] == 1
    assert q.reap(5.0) == ([], [])  # a departed trainer is reported lost once


def test_asking_again_releases_a_task_whose_reply_was_lost() -> None:
    q = make(samples=40)  # two tasks
    lost_reply = q.dispatch("a", 0.0).task  # persisted, but the reply never arrived
    assert lost_reply is not None
    lost_id, lost_epoch = lost_reply.id, lost_reply.epoch
    again = q.dispatch("a", 0.5).task
    assert again is not None and again.id == lost_id and again.epoch == lost_epoch + 1
    other = q.dispatch("b", 0.6).task
    assert other is not None and other.id != lost_id


def _finish_pass(q: TaskQueue, trainer: str, now: float) -> float:
    """Run every task of the current pass through `trainer`."""
    current = q.meta.current_pass
    while not q.finished and q.meta.current_pass == current:
        d = q.dispatch(trainer, now)
        assert d.task is not None
        now += 1.0
        assert q.finish(d.task.id, d.task.epoch, trainer, now, samples=d.task.end - d.task.begin)
    return now


def test_one_give_back_counts_one_redispatch_for_ever() -> None:
    """Defect 2: the counter compared cumulative dispatches with finished passes, so one
    give_back read as one more re-dispatch in every later pass."""
    q = make(passes=11)
    t = q.dispatch("a", 0.0).task
    assert t is not None and q.give_back(t.id, t.epoch, "a", 0.5)
    now = 1.0
    for _ in range(11):
        now = _finish_pass(q, "a", now)
    assert q.finished
    assert q.progress(now)["redispatches"] == 1


def test_redispatches_count_every_return_within_a_pass() -> None:
    q = make(passes=2, trainer_ttl=1.0)
    t = q.dispatch("a", 0.0).task
    assert t is not None and q.give_back(t.id, t.epoch, "a", 0.1)
    t = q.dispatch("b", 0.2).task
    assert t is not None and q.fail(t.id, t.epoch, "b", 0.3)
    q.dispatch("c", 0.4)  # the failed task went to the back: c gets another one
    q.beat("d", 3.0)
    q.reap(3.0)  # c is lost: its task comes back
    assert q.redispatches == 1  # only the given-back task was dispatched twice so far
    _finish_pass(q, "d", 3.0)
    assert q.redispatches == 3  # the failed one and c's one went out again


def test_failover_keeps_per_trainer_totals_and_redispatches() -> None:
    """Defect 9: trainer totals lived only in the master's memory; a new master started
    from zero."""
    q = make(passes=3)
    t = q.dispatch("a", 0.0).task
    assert t is not None and q.give_back(t.id, t.epoch, "a", 0.1)
    now = _finish_pass(q, "a", 1.0)
    now = _finish_pass(q, "b", now)
    before = q.progress(now)
    records = [TaskRecord.from_dict(r.to_dict()) for r in q.tasks.values()]
    restored = TaskQueue.restore(QueueMeta.from_dict(q.meta.to_dict()), records, now=now)
    after = restored.progress(now)
    for name in ("a", "b"):
        assert after["trainers"][name]["samples"] == before["trainers"][name]["samples"] == 100
        assert after["trainers"][name]["tasks"] == before["trainers"][name]["tasks"] == 5
    assert after["redispatches"] == before["redispatches"] == 1
    _finish_pass(restored, "b", now)
    assert restored.finished and restored.progress(now)["trainers"]["b"]["samples"] == 200


def test_restore_reads_records_written_before_the_new_fields() -> None:
    old = {"id": 0, "begin": 0, "end": 10, "state": "done", "epoch": 1, "failures": 0,
           "trainer": "", "dispatches": 1, "finished_passes": [0]}
    record = TaskRecord.from_dict(old)
    assert record.credits == {} and record.redispatches == 0 and record.dispatched_pass == -1
