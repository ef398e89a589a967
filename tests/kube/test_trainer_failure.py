"""A trainer Job that fails on Kubernetes fails its TrainingJob, with the trainer's error.

The pure part picks the error out of the trainer pods; the end-to-end part runs
`edl controller` (kopf + lightkube + the Controller) against kmock's Kubernetes
emulator over HTTP. kmock runs no Job controller, so the test plays it: it
stores a failed trainer pod (its log tail as termination message, as
``FallbackToLogsOnError`` leaves it) and the Job's ``Failed`` condition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest_asyncio
import yaml
from lightkube import AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from edl.kube.cluster import TrainingJobResource
from edl.kube.failures import last_trainer_failure
from edl.kube.runner import ControllerProcess
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
TJ = kmock.resource("edl.dev/v1/trainingjobs")
JOBS = kmock.resource("batch/v1/jobs")
EVENTS = kmock.resource("v1/events")


def trainer_pod(
    name: str, phase: str, code: int | None, finished: str = "", message: str = "",
    container: str = "trainer",
) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {}}
    if code is not None:
        state = {"terminated": {"exitCode": code, "finishedAt": finished, "reason": "Error"}}
        if message:
            state["terminated"]["message"] = message
    return {
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"edl.dev/job": "mnist", "edl.dev/role": "trainer"}},
        "spec": {"containers": [{"name": container, "image": "x"}]},
        "status": {"phase": phase, "containerStatuses": [{
            "name": container, "state": state, "image": "x", "imageID": "", "ready": False,
            "restartCount": 0,
        }]},
    }


def test_the_last_real_failure_is_picked_with_the_last_line_of_its_message() -> None:
    pods = [
        trainer_pod("t-0", "Failed", 1, "2026-01-01T10:00:00Z", "Traceback\nValueError: early"),
        trainer_pod("t-1", "Failed", 1, "2026-01-01T10:05:00Z", "Traceback\nKeyError: 'x'\n\n"),
        trainer_pod("t-2", "Failed", 143, "2026-01-01T10:09:00Z", "SIGTERM"),  # drained
        trainer_pod("t-3", "Running", None),
        trainer_pod("t-4", "Failed", 137, "2026-01-01T10:01:00Z"),  # no message: its reason
        trainer_pod("t-5", "Failed", 2, "2026-01-01T10:30:00Z", "boom", container="sidecar"),
    ]
    assert last_trainer_failure(pods) == "t-1 (exit 1): KeyError: 'x'"
    assert last_trainer_failure(reversed(pods)) == "t-1 (exit 1): KeyError: 'x'"
    assert last_trainer_failure([pods[4]]) == "t-4 (exit 137): Error"
    assert last_trainer_failure([pods[2], pods[3]]) == ""


def test_a_peer_s_side_of_a_collective_failure_never_hides_its_cause() -> None:
    """Rank 0 raises; torch closes the rendezvous, so rank 1's pod fails later with
    RendezvousClosedError: the status names rank 0's line (the real node's case)."""
    cause = trainer_pod("r-0", "Failed", 1, "2026-01-01T10:00:00Z",
                        "edl agent: ... failed (status 1): ValueError: bad learning rate: -1")
    peer = trainer_pod("r-1", "Failed", 1, "2026-01-01T10:00:09Z",
                       "edl agent: ... failed under torchrun (status 1): RendezvousClosedError")
    assert last_trainer_failure([cause, peer]).startswith("r-0 (exit 1): ")
    assert last_trainer_failure([peer]).startswith("r-1 (exit 1): ")  # all there is



def stored(emulator: Any, resource: Any, name: str) -> dict[str, Any]:
    obj = emulator.objects[(resource, "default", name)]
    if obj.deleted:
        raise KeyError(name)
    return _plain(obj)


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest_asyncio.fixture
async def controller(
    running_controller: Any, api: AsyncClient
) -> AsyncIterator[ControllerProcess]:
    await api.create(Node.from_dict({
        "metadata": {"name": "node-0"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }))
    async with running_controller() as process:
        yield process


async def test_a_failed_trainer_job_fails_the_training_job_with_the_error(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    job = yaml.safe_load((ROOT / "deploy/example-trainingjob.yaml").read_text())
    job["metadata"]["name"] = "mnist"
    await api.create(TrainingJobResource.from_dict(job), namespace="default")
    trainer = await eventually(lambda: stored(emulator, JOBS, "mnist-trainer"))
    assert trainer["spec"]["backoffLimit"] >= 6  # finite: crashes can fail it

    # the test plays the Job controller and kubelet: a crashed trainer, then the verdict
    await api.create(Pod.from_dict(trainer_pod(
        "mnist-trainer-abcde", "Failed", 1, "2026-01-01T10:00:00Z",
        "loading data\nTraceback (most recent call last):\nZeroDivisionError: division by zero",
    )), namespace="default")
    await api.patch(Job, "mnist-trainer", {"status": {"failed": 7, "conditions": [{
        "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }]}}, namespace="default", patch_type=PatchType.MERGE)

    status = await eventually(
        lambda: stored(emulator, TJ, "mnist")["status"]
        if stored(emulator, TJ, "mnist").get("status", {}).get("state") == "Failed" else None)
    assert status["message"] == (
        "the trainer Job failed: BackoffLimitExceeded (Job has reached the specified backoff "
        "limit); last failed trainer mnist-trainer-abcde (exit 1): "
        "ZeroDivisionError: division by zero"
    )
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "TrainerJobFailed")
    warnings = await eventually(lambda: [
        _plain(obj) for (resource, _, _), obj in list(emulator.objects.items())
        if resource == EVENTS and not obj.deleted and _plain(obj).get("type") == "Warning"
    ])
    assert any("ZeroDivisionError" in w.get("message", "") for w in warnings)
