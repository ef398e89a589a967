"""Real processes on a real etcd: `edl master`, `edl pserver`, `edl trainer`.

`JobProcesses` starts each role as the local runtime would (EDL_* env only),
logs to files under tmp_path, and kills every process it started at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edl.coord import leader_address
from edl.coord.embedded import EmbeddedEtcd
from edl.coord.errors import EtcdUnavailableError
from edl.runtime.config import RuntimeConfig
from edl.runtime.coordination import connect, make_client, read_state
from paced import paced_digits
from polling import NOT_YET, run_retrying, wait_until
from serving import answers

EDL = [sys.executable, "-m", "edl.cli.main"]
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
E2E_PASSES = 40
# The e2e runs are paced (tests/paced.py): 40 passes of 45 steps last at least ~12 s at
# 3 trainers, so the grow, the shrink and the chaos kills land while the job trains on
# any machine (CI's, faster than this one, finished an unpaced run inside a trainer start)
E2E_STEP_PAUSE_S = 0.02


@pytest.fixture
def etcd() -> Iterator[EmbeddedEtcd]:
    with EmbeddedEtcd() as server:
        yield server


class JobProcesses:
    def __init__(self, etcd: EmbeddedEtcd, tmp: Path, job: str = "digits", **env: str) -> None:
        self.etcd = etcd
        self.tmp = tmp
        self.job = job
        self.env = {
            **os.environ,
            "EDL_ETCD_ENDPOINTS": etcd.endpoints,
            "EDL_JOB_NAME": job,
            "EDL_PSERVERS": "2",
            "EDL_PASSES": "15",
            "EDL_POD_IP": "127.0.0.1",
            "EDL_PORT": "0",
            "EDL_CHECKPOINT_DIR": str(tmp / "checkpoints"),
            "EDL_CHECKPOINT_INTERVAL": "1",
            "EDL_ENTRYPOINT": "python train.py",
            "EDL_WORKSPACE": str(DIGITS),
            "EDL_LEASE_TTL": "3",
            "EDL_TRAINER_TTL": "3",
            "EDL_TASK_TIMEOUT": "30",
            **env,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.counter = 0

    def start(self, role: str, name: str | None = None, **env: str) -> str:
        self.counter += 1
        name = name or f"{role}-{self.counter}"
        log = (self.tmp / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [*EDL, role],
            env={**self.env, "EDL_POD_NAME": name, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.tmp,
        )
        log.close()
        return name

    def signal(self, name: str, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[name].pid, sig)

    def wait(self, name: str, timeout: float) -> int:
        return self.procs[name].wait(timeout)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def alive(self, role: str) -> list[str]:
        return [n for n, p in self.procs.items() if n.startswith(role) and p.poll() is None]

    def leader(self) -> str:
        """The live master process that leads now: the one listening on the address the
        election publishes ("leading (" in a log is history: a standby may have led once)."""

        def leading() -> str | None:
            address = self._read(leader_address)
            if not address:
                return None
            named = [n for n in self.alive("master")
                     if f"master listening on {address}\n" in self.log(n)]
            return named[0] if len(named) == 1 else None

        return wait_until(leading, 60, "a live master at the leader's address")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # ---- reading the job's state from etcd, as `edl status` would ----
    def _read(self, fetch):
        """`fetch(client)`'s value, with a client of the job's etcd (retried while etcd is
        unavailable, as `edl status` is)."""

        async def read():
            client = await connect(RuntimeConfig(job_name=self.job,
                                                 etcd_endpoints=self.etcd.endpoints))
            try:
                return await fetch(client)
            finally:
                await client.shutdown()

        return run_retrying(read, (EtcdUnavailableError,))

    def read_json(self, key: str):
        """A JSON value under the job's etcd prefix (None: absent)."""

        async def fetch(client):
            raw = await client.get_key(key)
            return json.loads(raw) if raw else None

        return self._read(fetch)

    def live_pservers(self) -> dict:
        """The registered pservers by index."""
        return self._read(lambda client: client.list_pservers())

    def serving_pserver(self, index: int = 0, other_than: str | None = None) -> str:
        """The address of the pserver at `index` once it answers RPCs (see `answers`)."""

        def serving() -> str | None:
            address = self.live_pservers().get(index)
            if not address or address == other_than:
                return None
            return address if answers(address, "PServer") else None

        return wait_until(serving, 90, f"a pserver serving index {index}")

    def state(self) -> tuple[dict, dict[int, dict]]:
        """(progress, task records by id)."""

        async def read() -> tuple[dict, dict[int, dict]]:
            config = RuntimeConfig(job_name=self.job, etcd_endpoints=self.etcd.endpoints)
            client = make_client(config)
            try:
                raw = await read_state(client, "master/")
            finally:
                await client.shutdown()
            progress = json.loads(raw.get("master/progress", b"{}"))
            tasks = {
                int(k.rsplit("/", 1)[1]): json.loads(v)
                for k, v in raw.items()
                if k.startswith("master/tasks/")
            }
            return progress, tasks

        return run_retrying(read, (EtcdUnavailableError,))

    def wait_for(self, what: Callable[[dict], bool], timeout: float, label: str) -> dict:
        deadline = time.monotonic() + timeout
        progress: dict = {}
        while time.monotonic() < deadline:
            progress, _ = self.state()
            try:  # a progress published before what is asked about: not yet
                if progress and what(progress):
                    return progress
            except NOT_YET:
                pass
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {label}; last progress {progress}")


@pytest.fixture
def job(etcd: EmbeddedEtcd, tmp_path: Path) -> Iterator[JobProcesses]:
    procs = JobProcesses(etcd, tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()


def assert_every_task_once_per_pass(tasks: dict[int, dict], passes: int) -> None:
    """The master's accounting: each task finished exactly once in every pass."""
    assert tasks, "no task records in etcd"
    for task_id, record in tasks.items():
        assert record["state"] == "done", (task_id, record)
        assert record["finished_passes"] == list(range(passes)), (task_id, record)


@pytest.fixture
def harness() -> types.SimpleNamespace:
    """Helpers for test modules (importlib mode: tests cannot import conftest)."""
    return types.SimpleNamespace(
        JobProcesses=JobProcesses, once_per_pass=assert_every_task_once_per_pass,
        e2e_step_pause_s=E2E_STEP_PAUSE_S,
    )  # fmt: skip


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One elastic fault-free run, shared by the tests that compare against it."""
    with EmbeddedEtcd() as etcd:
        tmp = tmp_path_factory.mktemp("fault-free")
        job = JobProcesses(
            etcd, tmp, EDL_PASSES=str(E2E_PASSES),
            EDL_WORKSPACE=str(paced_digits(tmp / "paced", E2E_STEP_PAUSE_S)),
            # the hold in run_elastic must not read as a lost trainer or a late task
            EDL_TRAINER_TTL="300", EDL_TASK_TIMEOUT="300",
        )  # fmt: skip
        try:
            yield run_elastic(job)
        finally:
            job.stop_all()


def run_elastic(job) -> dict:
    job.start("master", "master-0")
    job.start("pserver", "pserver-0")
    job.start("pserver", "pserver-1")
    job.start("trainer", "trainer-a")
    job.start("trainer", "trainer-b")
    job.wait_for(lambda p: p["tasks_done"] > 0, 120, "the first finished task")
    # Grow towards max while it trains. Trainer-c's start (torch's import) can take
    # longer than the whole job on a fast, busy machine (CI saw a and b finish all
    # 40 passes first), so a and b are held until c has reached the master.
    for held in ("trainer-a", "trainer-b"):
        job.signal(held, signal.SIGSTOP)
    job.start("trainer", "trainer-c")
    try:
        job.wait_for(lambda p: "trainer-c" in p["trainers"], 120, "trainer-c to reach the master")
    finally:
        for held in ("trainer-a", "trainer-b"):
            job.signal(held, signal.SIGCONT)
    job.wait_for(
        lambda p: all(
            p["trainers"].get(t, {}).get("tasks", 0) > 0 for t in ("trainer-b", "trainer-c")
        ),
        120,
        "trainer-b and trainer-c to finish tasks",
    )
    before = job.state()[0]["pass"]
    sent = time.monotonic()
    job.signal("trainer-b", signal.SIGTERM)  # shrink: scale-down
    code = job.wait("trainer-b", 30)
    exit_seconds = time.monotonic() - sent
    progress = job.wait_for(
        lambda p: p["finished"] and "accuracy" in p["metrics"], 240, "the job to finish"
    )
    codes = {name: job.wait(name, 60) for name in ("trainer-a", "trainer-c")}
    _, tasks = job.state()
    return {
        "progress": progress, "tasks": tasks, "sigterm_code": code, "exit_seconds": exit_seconds,
        "pass_at_sigterm": before, "codes": codes, "log_b": job.log("trainer-b"),
    }  # fmt: skip
