"""A pserver (or a collective job's rank 0) that cannot checkpoint and a job whose
progress stalls are said on the TrainingJob (a condition and an Event, cleared on
recovery), and the stall limit ends the job; the health is published by the runtime's
own code into a real etcd the job names as its external one (kwok's pods run no
code)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from e2e.helpers import trainingjob, wait_trainers
from e2e.rest import Rest
from edl.coord.client import EtcdClient
from edl.coord.embedded import EmbeddedEtcd
from edl.coord.keys import job_prefix
from edl.local.progress import progress_key
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.ckpt_health import RankZeroWatch
from edl.runtime.pserver.main import Checkpointer
from edl.runtime.pserver.optim import OptimizerConfig
from edl.runtime.pserver.shard import Shard
from polling import eventually, wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def _condition(rest: Rest, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    conditions = (rest.get("TrainingJob", name, namespace).get("status") or {}).get(
        "conditions") or ()
    return next((c for c in conditions if c["type"] == kind), None)


def _events(rest: Rest, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in rest.events_for(namespace, name) if e["reason"] == reason]


def _job(name: str, endpoints: str, **annotations: str) -> dict[str, Any]:
    job = trainingjob(name, min_instance=1, max_instance=1)
    job["metadata"]["annotations"] = annotations
    job["spec"]["master"]["etcd-endpoint"] = endpoints
    return job


def test_a_pserver_that_cannot_checkpoint_is_a_condition_and_an_event_until_it_can(
        rest: Rest, namespace: str, start_controller, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the checkpoint directory should be")
    with EmbeddedEtcd() as etcd:
        start_controller()
        rest.create(_job("ckpt", etcd.endpoints), namespace)
        wait_trainers(rest, namespace, "ckpt", 1)

        async def scenario() -> None:
            client = EtcdClient(etcd.endpoints, 1, 2.0, 10,
                                prefix=job_prefix(namespace, "ckpt"))
            try:
                index = await client.register(7164)
                shard = Shard()
                shard.init({"w#0": np.ones(4)}, OptimizerConfig())
                shard.apply({"w#0": np.ones(4)})
                checkpointer = Checkpointer(client, shard, index, blocker / "ckpt")
                assert not await checkpointer.attempt()  # as the pserver's interval does
                loop = asyncio.get_running_loop()
                failed_at = loop.time()
                failing = await eventually(lambda: (lambda c: c if c and c["status"] == "True"
                                                    else None)(_condition(
                                                        rest, namespace, "ckpt",
                                                        "CheckpointFailing")),
                                           30, "the CheckpointFailing condition")
                assert loop.time() - failed_at < 10, "said within seconds"
                assert f"pserver {index} cannot checkpoint" in failing["message"]
                assert "Not a directory" in failing["message"]
                assert "its whole state is lost if it dies" in failing["message"]
                [warning] = await eventually(
                    lambda: _events(rest, namespace, "ckpt", "CheckpointFailing"), 10,
                    "the CheckpointFailing Event")
                assert warning["type"] == "Warning"
                assert warning["message"] == failing["message"]

                blocker.unlink()
                assert await checkpointer.attempt()
                fixed_at = loop.time()
                cleared = await eventually(lambda: (lambda c: c if c and c["status"] == "False"
                                                    else None)(_condition(
                                                        rest, namespace, "ckpt",
                                                        "CheckpointFailing")),
                                           30, "the condition cleared")
                assert loop.time() - fixed_at < 10
                assert cleared["reason"] == "CheckpointsSaved"
                [normal] = await eventually(
                    lambda: _events(rest, namespace, "ckpt", "CheckpointRecovered"), 10,
                    "the recovery Event")
                assert normal["type"] == "Normal"
                assert len(_events(rest, namespace, "ckpt", "CheckpointFailing")) == 1
            finally:
                await client.shutdown()

        asyncio.run(scenario())


def _publish_progress(endpoints: str, namespace: str, name: str, tasks_done: int) -> None:
    # the fields of the master's record (edl.runtime.master.queue.TaskQueue.progress)
    # the controller reads; the rest of it does not decide a stall
    gateway.put(endpoints, progress_key(namespace, name), json.dumps(
        {"pass": 0, "passes": 2, "finished": False, "tasks_total": 10,
         "tasks_done": tasks_done, "samples_per_s": 0.0}))


def test_a_stalled_job_is_a_condition_naming_its_trainers_and_its_limit_ends_it(
        rest: Rest, namespace: str, start_controller) -> None:
    with EmbeddedEtcd() as etcd:
        start_controller()
        _publish_progress(etcd.endpoints, namespace, "hung", 3)
        rest.create(_job("hung", etcd.endpoints, **{"edl.dev/stall-warning-s": "2",
                                                    "edl.dev/stall-limit-s": "8"}), namespace)
        wait_trainers(rest, namespace, "hung", 1)
        [trainer] = [p["metadata"]["name"] for p in rest.list("Pod", namespace)
                     if p["metadata"]["labels"].get("edl.dev/role") == "trainer"]

        def stalled(status: str) -> Any:
            condition = _condition(rest, namespace, "hung", "Stalled")
            return condition if condition and condition["status"] == status else None

        async def scenario() -> None:
            first = await eventually(lambda: stalled("True"), 30, "the Stalled condition")
            assert first["reason"] == "NoProgress"
            assert trainer in first["message"] and "not advancing" in first["message"]
            assert "edl.dev/stall-limit-s" in first["message"]
            [warning] = await eventually(lambda: _events(rest, namespace, "hung", "Stalled"),
                                         10, "the Stalled Event")
            assert warning["type"] == "Warning" and trainer in warning["message"]
            _publish_progress(etcd.endpoints, namespace, "hung", 4)
            await eventually(lambda: stalled("False"), 15, "the condition cleared")
            await eventually(lambda: _events(rest, namespace, "hung", "ProgressResumed"), 10,
                             "the ProgressResumed Event")
            assert rest.get("TrainingJob", "hung", namespace)["status"]["state"] == "Running"
            # no move again: warned again, then ended at the limit
            ended = await eventually(lambda: (lambda s: s if s.get("state") == "Failed"
                                              else None)(rest.get("TrainingJob", "hung",
                                                                  namespace)["status"]),
                                     40, "the job ended by its stall limit")
            assert ended["message"].startswith("stalled: no progress for")
            assert trainer in ended["message"]
            failed = next(c for c in ended["conditions"] if c["type"] == "Failed")
            assert failed["reason"] == "Stalled"
            await eventually(lambda: rest.get("Job", "hung-trainer", namespace)["spec"][
                "parallelism"] == 0, 15, "the trainers stopped")
            await eventually(lambda: all(
                rest.get("ReplicaSet", f"hung-{role}", namespace)["spec"]["replicas"] == 0
                for role in ("master", "pserver")), 15, "the master and pservers stopped")

        asyncio.run(scenario())


def test_a_collective_rank_0_that_cannot_checkpoint_is_a_condition_and_an_event_until_it_can(
        rest: Rest, namespace: str, start_controller, tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.write_text("a file where the checkpoint directory should be")
    job = yaml.safe_load((ROOT / "examples" / "digits-ddp" / "job.yaml").read_text())
    job["metadata"] = {"name": "ddp-ckpt"}
    job["spec"]["trainer"].update({"min-instance": 1, "max-instance": 1,
                                   "workspace": "/home/edl/examples/digits-ddp"})
    with EmbeddedEtcd() as etcd:
        job["spec"]["master"]["etcd-endpoint"] = etcd.endpoints
        start_controller()
        rest.create(job, namespace)
        wait_trainers(rest, namespace, "ddp-ckpt", 1)
        [pod] = [p["metadata"]["name"] for p in rest.list("Pod", namespace)
                 if p["metadata"]["labels"].get("edl.dev/role") == "trainer"
                 and p["metadata"]["name"].startswith("ddp-ckpt-")]
        # the pod's agent, as it runs once its rendezvous placed rank 0 there
        gateway.put(etcd.endpoints, keys.agent_key(namespace, "ddp-ckpt", pod),
                    json.dumps({"rank": 0, "round": 0, "nodes": 1, "world_size": 1}))
        watch = RankZeroWatch({"EDL_ETCD_ENDPOINTS": etcd.endpoints, "EDL_POD_NAME": pod},
                              namespace, "ddp-ckpt", str(directory))
        assert watch.check() is not None
        failed_at = time.monotonic()

        def condition(status: str) -> Any:
            found = _condition(rest, namespace, "ddp-ckpt", "CheckpointFailing")
            return found if found and found["status"] == status else None

        failing = wait_until(lambda: condition("True"), 30, "the CheckpointFailing condition")
        assert time.monotonic() - failed_at < 10, "said within seconds"
        assert failing["message"].startswith(f"rank 0 on {pod} cannot checkpoint: ")
        assert "Not a directory" in failing["message"]
        assert "is lost if the workers restart" in failing["message"]
        [warning] = wait_until(lambda: _events(rest, namespace, "ddp-ckpt", "CheckpointFailing"),
                               10, "the CheckpointFailing Event")
        assert warning["type"] == "Warning" and warning["message"] == failing["message"]
        directory.unlink()
        directory.mkdir()
        watch.check()
        fixed_at = time.monotonic()
        wait_until(lambda: condition("False"), 30, "the condition cleared")
        assert time.monotonic() - fixed_at < 10
        [normal] = wait_until(lambda: _events(rest, namespace, "ddp-ckpt", "CheckpointRecovered"),
                              10, "the recovery Event")
        assert normal["type"] == "Normal" and pod in normal["message"]
