"""`edl controller --policy goodput` on a real control plane resizes a PS job's trainer Job
while it changes the job's batch (issue 32): the job's figures (samples/s at its
trainers and batch, φ, compute rate) are published as its master publishes them, into a
real etcd the job names as its external one (kwok's pods run no code), and the chosen
batch comes back on the trainer Job and in the job's etcd, where its pservers and
master read it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from e2e.helpers import filler, parallelism, trainer_pods, trainingjob, wait_trainers
from e2e.rest import Rest
from edl.api.names import ANNOTATION_BATCH_SIZE, trainer_job_name
from edl.coord.embedded import EmbeddedEtcd
from edl.local.progress import progress_key
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.batch import read_batch
from polling import wait_until

pytestmark = pytest.mark.timeout(240)

INITIAL, COMPUTE, OVERHEAD_S = 64, 400.0, 0.2  # one trainer computes 400 samples/s


def _chosen(rest: Rest, namespace: str, name: str) -> int | None:
    job = rest.find("Job", trainer_job_name(name), namespace) or {}
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_BATCH_SIZE)
    return int(float(text)) if text else None


class Master:
    """Publishes the job's progress as its master does, once every 0.5 s: its running
    trainers, samples/s of a job whose step is (B / n) / r + s at batch B (the published
    one, else its per-trainer batch kept), φ = ``phi`` and the compute rate r."""

    def __init__(self, rest: Rest, etcd: str, namespace: str, name: str) -> None:
        self.rest, self.etcd, self.namespace, self.name = rest, etcd, namespace, name
        self.phi = 200.0
        self.batches: list[int] = []  # each batch the job's etcd held, in order
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            n = len(trainer_pods(self.rest, self.namespace, self.name))
            published = read_batch(self.etcd, self.namespace, self.name)
            if published is not None and (not self.batches or self.batches[-1] != published):
                self.batches.append(published)
            if n == 0:
                continue
            batch = published or INITIAL * n
            rate = batch / (batch / n / COMPUTE + OVERHEAD_S)
            record: dict[str, Any] = {
                "pass": 0, "passes": 100, "finished": False, "contributing": n,
                "samples_per_s": round(rate, 2), "remaining_samples": 10_000_000,
                "batch": batch, "initial_batch": INITIAL, "noise_scale": self.phi,
                "compute_rate": COMPUTE,
            }
            gateway.put(self.etcd, progress_key(self.namespace, self.name), json.dumps(record))


def test_goodput_resizes_a_ps_job_while_its_batch_changes(
        rest: Rest, namespace: str, start_controller) -> None:
    with EmbeddedEtcd() as etcd:
        job = trainingjob("adapt", min_instance=1, max_instance=4, trainer_cpu="250m",
                          batch={"initial": INITIAL, "max": 4096})
        job["spec"]["master"]["etcd-endpoint"] = etcd.endpoints
        master = Master(rest, etcd.endpoints, namespace, "adapt")
        start_controller("replica-a", "--policy=goodput")
        rest.create(job, namespace)
        master.thread.start()
        try:
            first = wait_until(lambda: _chosen(rest, namespace, "adapt"), 90,
                               "a batch chosen from the published figures")
            grown = wait_until(lambda: (p := parallelism(rest, namespace, "adapt")) and p > 1
                               and p, 90, "goodput to grow the trainer Job")
            # the gradient noise grows (late in training): a larger batch pays off
            master.phi = 50_000.0
            later = wait_until(lambda: (b := _chosen(rest, namespace, "adapt")) and b > first
                               and b, 90, "a larger batch once φ rose")
            wait_until(lambda: later in master.batches, 30,
                       "the new batch in the job's etcd (where its pservers read it)")
        finally:
            master.stop.set()
            master.thread.join(5)
        assert first in master.batches and master.batches.index(first) < master.batches.index(
            later), master.batches
        assert first > INITIAL * 1 and grown > 1  # a batch beyond the declared one
        assert later <= 4096
        assert gateway.get(etcd.endpoints, keys.batch_key(namespace, "adapt")) == str(later)


def test_a_shrink_comes_with_the_batch_for_the_new_count(
        rest: Rest, namespace: str, start_controller) -> None:
    """Another tenant's pods take the room and the job shrinks from 4 trainers to 1: the
    best batch at 1 is smaller (√(n·r·s·φ)), so the Autoscaler changes the batch with
    the trainers, and the job's etcd follows. (Growing back waits out goodput's
    120 s cooldown: not worth the suite's time.)"""
    with EmbeddedEtcd() as etcd:
        job = trainingjob("resize", min_instance=1, max_instance=4, trainer_cpu="250m",
                          batch={"initial": INITIAL, "max": 4096})
        job["spec"]["master"]["etcd-endpoint"] = etcd.endpoints
        master = Master(rest, etcd.endpoints, namespace, "resize")
        start_controller("replica-a", "--policy=goodput")
        rest.create(job, namespace)
        master.thread.start()
        try:
            wait_trainers(rest, namespace, "resize", 4)
            at_four = wait_until(lambda: _chosen(rest, namespace, "resize"), 60,
                                 "a batch chosen at 4 trainers")
            filler(rest, namespace, 40)
            wait_trainers(rest, namespace, "resize", 1, timeout=120)
            at_one = wait_until(lambda: (b := _chosen(rest, namespace, "resize")) != at_four
                                and b, 60, "another batch at 1 trainer")
            wait_until(lambda: master.batches[-1:] == [at_one], 30, "the job's etcd to follow")
        finally:
            master.stop.set()
            master.thread.join(5)
            filler(rest, namespace, 0)
        assert at_one < at_four, (at_four, at_one)
        assert parallelism(rest, namespace, "resize") == 1
        assert master.batches.index(at_four) < master.batches.index(at_one), master.batches
