"""A new batch published for a collective job restarts its round (issue 22): the
rendezvous handler reports a node waiting, which torch's agent answers by restarting
its workers into a new round, where they read the new batch."""

from __future__ import annotations

from typing import Any

from edl.runtime.collective.batch import BatchWatch
from edl.runtime.collective.handler import ReportingHandler


class Published:
    def __init__(self) -> None:
        self.value: int | None = None
        self.reads = 0

    def __call__(self, _endpoints: str, _namespace: str, _job: str) -> int | None:
        self.reads += 1
        return self.value


class Inner:
    """torch's handler, as far as the wrapper uses it."""

    waiting = 0

    def next_rendezvous(self) -> Any:
        class Info:
            rank, world_size = 0, 2
        return Info()

    def num_nodes_waiting(self) -> int:
        return self.waiting


def test_a_published_batch_other_than_the_round_s_asks_for_a_restart() -> None:
    published = Published()
    watch = BatchWatch("http://etcd", "default", "job", interval_s=0.0, read=published)
    handler = ReportingHandler(Inner(), lambda _event: None, watch)  # type: ignore[arg-type]
    handler.next_rendezvous()  # round 1 starts with no batch published
    assert handler.num_nodes_waiting() == 0
    published.value = 64  # the Autoscaler chose one
    assert handler.num_nodes_waiting() == 1  # torch restarts the workers
    handler.next_rendezvous()  # round 2 runs 64
    assert handler.num_nodes_waiting() == 0
    published.value = None  # etcd does not answer: no restart for that
    assert handler.num_nodes_waiting() == 0


def test_the_watch_reads_etcd_at_most_once_per_interval() -> None:
    published = Published()
    watch = BatchWatch("http://etcd", "default", "job", interval_s=3600.0, read=published)
    watch.round_started()
    published.value = 128
    assert not any(watch.changed() for _ in range(50))
    assert published.reads == 1  # the round's start only


def test_nodes_waiting_come_first() -> None:
    inner = Inner()
    inner.waiting = 2
    handler = ReportingHandler(inner, lambda _event: None, None)  # type: ignore[arg-type]
    assert handler.num_nodes_waiting() == 2
