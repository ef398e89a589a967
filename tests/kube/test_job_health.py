"""Checkpoint health and stalls on Kubernetes: the conditions and Events they make (pure),
and the controller's reader of a job's etcd (a real etcd, no API server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import yaml

from edl.api.trainingjob import TrainingJob
from edl.control.job_status import finished_state
from edl.coord.embedded import EmbeddedEtcd, free_port
from edl.jobparser import JobParser
from edl.kube.health import ANNOTATION_STALL_LIMIT, ANNOTATION_STALL_WARNING, EtcdJobHealth
from edl.kube.status import failure_reason, health_changes, kube_status
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.ckpt_health import RankZeroWatch
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
FAILING = "pserver 0 cannot checkpoint: [Errno 28] No space left on device; ..."


def _status(checkpoint: str = "", stall: str = "", previous: Any = None) -> dict[str, Any]:
    return kube_status({"state": "Running", "message": "1 of 1 trainers running",
                        "health": {"checkpoint": checkpoint, "stall": stall}}, previous, 1)


def test_health_is_two_conditions_and_each_change_one_event() -> None:
    fine = _status()
    kinds = {c["type"]: (c["status"], c["reason"]) for c in fine["conditions"]}
    assert kinds["CheckpointFailing"] == ("False", "CheckpointsSaved")
    assert kinds["Stalled"] == ("False", "Progressing")
    assert health_changes({}, fine) == []  # first seen fine: nothing to say
    failing = _status(FAILING, previous=fine)
    assert health_changes(fine, failing) == [("CheckpointFailing", FAILING, True)]
    assert health_changes(failing, _status(FAILING, previous=failing)) == []  # said once
    stalled = _status(FAILING, "no progress for 9 s: t-1 running", previous=failing)
    assert health_changes(failing, stalled) == [
        ("Stalled", "no progress for 9 s: t-1 running", True)]
    both_clear = _status(previous=stalled)
    assert [(r, w) for r, _, w in health_changes(stalled, both_clear)] == [
        ("CheckpointRecovered", False), ("ProgressResumed", False)]
    assert "was: no progress for 9 s" in health_changes(stalled, both_clear)[1][1]
    # a status without health (another cluster, a finished job) has no such conditions
    plain = kube_status({"state": "Running", "message": ""}, None, 1)
    assert {c["type"] for c in plain["conditions"]} == {
        "Ready", "Scaling", "Complete", "Failed", "Suspended"}


def test_a_job_its_stall_limit_ended_is_failed_for_good() -> None:
    status = {"state": "Failed", "message": "stalled: no progress for 9 s (...): t-1"}
    assert finished_state(status) == "Failed"
    assert failure_reason(status["message"]) == "Stalled"


def _job(path: str, **annotations: str) -> TrainingJob:
    body = yaml.safe_load((ROOT / path).read_text())
    body["metadata"]["annotations"] = annotations
    return JobParser().validate(body)


async def test_a_collective_job_whose_metrics_stop_moving_is_stalled_until_they_move() -> None:
    job = _job("examples/digits-ddp/job.yaml", **{ANNOTATION_STALL_WARNING: "0.5",
                                                  ANNOTATION_STALL_LIMIT: "not a number"})
    namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
    etcd = EmbeddedEtcd()
    await etcd.astart()
    health = EtcdJobHealth(lambda _job: etcd.endpoints, lambda ns, n: ["t-0", "t-1"],
                           timeout_s=0.5)
    try:
        def put_epoch(epoch: int) -> None:
            gateway.put(etcd.endpoints, keys.metrics_key(namespace, name),
                        json.dumps({"epoch": epoch, "loss": 0.5}))

        put_epoch(1)
        assert health.check(job, running=True).stall == ""  # nothing read yet
        stalled = await eventually(lambda: health.check(job, running=True).stall, 10,
                                   "the stall")
        assert stalled.startswith("no progress for") and "t-0, t-1" in stalled
        assert health.check(job, running=True).fatal == ""  # a bad limit is no limit
        put_epoch(2)
        await eventually(lambda: not health.check(job, running=True).stall, 10, "the move")
        assert health.check(job, running=False).checkpoint == ""
    finally:
        health.forget(namespace, name)
        await etcd.astop()


async def test_a_job_whose_etcd_is_away_is_never_called_stalled_and_never_waited_for() -> None:
    job = _job("deploy/example-trainingjob.yaml", **{ANNOTATION_STALL_WARNING: "0.1",
                                                     ANNOTATION_STALL_LIMIT: "0.2"})
    dead = f"http://127.0.0.1:{free_port()}"
    health = EtcdJobHealth(lambda _job: dead, lambda ns, n: ["t-0"], timeout_s=0.2,
                           backoff_s=0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(20):
        result = health.check(job, running=True)
        assert (result.stall, result.fatal, result.checkpoint) == ("", "", "")
        await asyncio.sleep(0.05)
    assert loop.time() - started < 3  # each check returned at once
    health.forget(job.metadata.namespace or "default", job.metadata.name or "")


async def test_a_collective_rank_0_that_cannot_checkpoint_is_read_until_it_can(
        tmp_path: Path) -> None:
    job = _job("examples/digits-ddp/job.yaml")
    namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
    directory = tmp_path / "ckpt"
    directory.write_text("a file where the checkpoint directory should be")
    etcd = EmbeddedEtcd()
    await etcd.astart()
    health = EtcdJobHealth(lambda _job: etcd.endpoints, lambda ns, n: ["t-0"], timeout_s=0.5)
    try:  # the agent's own watch, as the pod hosting rank 0 runs it
        gateway.put(etcd.endpoints, keys.agent_key(namespace, name, "t-0"),
                    json.dumps({"rank": 0, "round": 1}))
        watch = RankZeroWatch({"EDL_ETCD_ENDPOINTS": etcd.endpoints, "EDL_POD_NAME": "t-0"},
                              namespace, name, str(directory))
        assert watch.check() is not None
        failing = await eventually(lambda: health.check(job, running=True).checkpoint, 10,
                                   "rank 0's checkpoint failure")
        assert failing.startswith("rank 0 on t-0 cannot checkpoint: ")
        assert "Not a directory" in failing and "lost if the workers restart" in failing
        directory.unlink()
        directory.mkdir()
        watch.check()
        await eventually(lambda: not health.check(job, running=True).checkpoint, 10,
                         "the recovery")
    finally:
        health.forget(namespace, name)
        await etcd.astop()
