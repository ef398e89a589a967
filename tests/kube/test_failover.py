"""Chaos: two real `edl controller` processes against kmock's emulator; SIGKILL the leader.

The processes are the real CLI (kopf, lightkube, Controller, Autoscaler); the API
server is kmock's emulator over HTTP with resourceVersion preconditions added
(conftest.py), which is what keeps the two replicas from both holding the Lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from edl.kube.cluster import TrainingJobResource
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
EDL = str(Path(sys.executable).with_name("edl"))
LEASES = kmock.resource("coordination.k8s.io/v1/leases")
JOBS = kmock.resource("batch/v1/jobs")

pytestmark = pytest.mark.slow



def holder(emulator: Any) -> str | None:
    key = (LEASES, "edl-system", "edl-controller")  # the default --lease-namespace
    if key not in emulator.objects or emulator.objects[key].deleted:
        return None
    return dict(emulator.objects[key]).get("spec", {}).get("holderIdentity")


def has_trainer_job(emulator: Any, job: str) -> bool:
    key = (JOBS, "default", f"{job}-trainer")
    return key in emulator.objects and not emulator.objects[key].deleted


def start_controller(url: str, identity: str, log: Path) -> subprocess.Popen[bytes]:
    args = [EDL, "controller", f"--server={url}", "--listen=127.0.0.1:0",
            f"--identity={identity}", "--lease-duration=4", "--renew-deadline=3",
            "--retry-period=0.5", "--interval=0.5", "--status-interval=0.5"]
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def create_job(api: AsyncClient, name: str) -> None:
    job = yaml.safe_load((ROOT / "deploy/example-trainingjob.yaml").read_text())
    job["metadata"]["name"] = name
    await api.create(TrainingJobResource.from_dict(job), namespace="default")


async def test_standby_takes_over_when_the_leader_is_killed(
    api: AsyncClient, emulator: Any, tmp_path: Path
) -> None:
    await api.create(Node.from_dict({"metadata": {"name": "node-0"},
                                     "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}}))
    url = str(emulator.url)
    first = start_controller(url, "replica-a", tmp_path / "a.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        await eventually(lambda: holder(emulator) == "replica-a")
        second = start_controller(url, "replica-b", tmp_path / "b.log")
        await create_job(api, "one")
        await eventually(lambda: has_trainer_job(emulator, "one"))
        await asyncio.sleep(2.0)
        assert holder(emulator) == "replica-a", "the standby took the lease from a live leader"
        assert second.poll() is None, (tmp_path / "b.log").read_text()

        first.send_signal(signal.SIGKILL)  # no release: the lease must expire
        await eventually(lambda: first.poll() is not None)
        await eventually(lambda: holder(emulator) == "replica-b")
        await create_job(api, "two")
        await eventually(lambda: has_trainer_job(emulator, "two"))

        second.send_signal(signal.SIGTERM)  # clean stop releases the lease
        # Wait without blocking the event loop: the emulator serves the release on it.
        await eventually(lambda: second.poll() is not None)
        assert second.returncode == 0, (tmp_path / "b.log").read_text()
        assert holder(emulator) is None
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=30)
