"""What an admin meets first when starting `edl controller` (the real CLI, as a process):
the start-up line, readiness that says why it is false, a log without one line per request.

The API server is kmock's emulator (tests/kube/conftest.py) or nothing at all; the same
points against the real control plane and the shipped RBAC: tests/e2e/test_outside.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from edl.kube.cluster import TrainingJobResource
from edl.procs import free_port
from polling import eventually, wait_until

ROOT = Path(__file__).resolve().parents[2]
EDL = str(Path(sys.executable).with_name("edl"))
JOBS = kmock.resource("batch/v1/jobs")

pytestmark = pytest.mark.slow


def start(server: str, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [EDL, "controller", f"--server={server}", f"--listen=127.0.0.1:{port}",
             "--identity=replica-a", "--lease-duration=4", "--renew-deadline=3",
             "--retry-period=0.5", "--interval=0.5", "--status-interval=0.5", *args],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return proc, port


def readyz(port: int) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None  # not listening yet


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def test_an_unreachable_api_server_makes_it_unready_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    log = tmp_path / "controller.log"
    proc, port = start(url, log)
    try:
        _, text = wait_until(lambda: (r := readyz(port)) and r[0] == 503 and r, 60,
                                "/readyz 503")
        assert f"cannot reach the API server at {url}" in text, text
        assert text.startswith("standby, cannot use the leader Lease edl-system/edl-controller")
        wait_until(lambda: f"cannot reach the API server at {url}" in log.read_text(), 30,
                   "the log names the URL")
    finally:
        assert stop(proc) == 0, log.read_text()
    lines = log.read_text().splitlines()
    startup = [line for line in lines if "edl controller 0." in line]
    assert len(startup) == 1, lines[:5]
    for part in (f"API server {url}", "identity replica-a", "namespaces all",
                 "Lease edl-system/edl-controller", "policy default"):
        assert part in startup[0], startup[0]
    # the same failure every 0.5 s is logged once, not once per attempt
    assert sum("cannot reach the API server" in line for line in lines) == 1, lines


async def test_the_leader_logs_no_request_lines_and_no_signal_warning(
        api: AsyncClient, emulator: Any, tmp_path: Path) -> None:
    await api.create(Node.from_dict({"metadata": {"name": "node-0"},
                                     "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}}))
    log = tmp_path / "controller.log"
    proc, port = start(str(emulator.url), log)
    try:
        job = yaml.safe_load((ROOT / "deploy/example-trainingjob.yaml").read_text())
        await api.create(TrainingJobResource.from_dict(job), namespace="default")
        trainer = f"{job['metadata']['name']}-trainer"
        await eventually(lambda: (JOBS, "default", trainer) in emulator.objects)
        answer = await eventually(lambda: (r := readyz(port)) and r[0] == 200 and r)
        assert answer[1].startswith("leader"), answer
        await asyncio.sleep(1.5)  # a few ticks and status writes: requests that would log
    finally:
        await eventually(lambda: stop(proc) is not None)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "HTTP Request:" not in text  # httpx's one INFO line per request: only with -v
    assert "Handler '" not in text  # kopf's line per handled event, status writes included
    assert "OS signals are ignored" not in text
    assert "replica-a acquired lease edl-system/edl-controller" in text


def test_verbose_brings_the_request_lines_back(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    url = f"http://127.0.0.1:{free_port()}"
    proc, _ = start(url, log, "-v")
    try:
        wait_until(lambda: "DEBUG" in log.read_text(), 60, "debug lines with -v")
    finally:
        stop(proc)
